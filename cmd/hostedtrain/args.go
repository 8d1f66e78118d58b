package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// placeholders say in words what a command's argument is, by the name its Use gives it.
var placeholders = map[string]string{
	"FILE": "a job file (`hostedtrain train init` writes one)", "ID": "a job id (or a piece of it, 4 characters at least)",
	"RUN": "a job id", "NODE": "a node's id (`hostedtrain admin nodes list`)", "ENV": "an environment id",
	"URL": "a receiver's URL", "ORG": "an organization", "TOKEN": "a token", "DELIVERY_ID": "a delivery's id",
}

// needArgs is cobra.ExactArgs(n) that says what is missing in plain words, from the command's
// Use: "hostedtrain train submit needs a job file: hostedtrain train submit FILE".
func needArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == n {
			return nil
		}
		var names []string
		for _, f := range strings.Fields(cmd.Use)[1:] {
			if strings.HasPrefix(f, "-") || strings.HasPrefix(f, "[") {
				break
			}
			names = append(names, f)
		}
		usage := cmd.CommandPath() + " " + strings.Join(names, " ")
		if len(args) > n {
			return fmt.Errorf("%s takes %d argument(s), not %d: %s", cmd.CommandPath(), n, len(args), usage)
		}
		var missing []string
		for i := len(args); i < n && i < len(names); i++ {
			what := placeholders[names[i]]
			if names[i] == "ID" && cmd.Parent() != nil && cmd.Parent().Name() == "webhook" {
				what = "a webhook's id (`hostedtrain webhook list`)"
			}
			if what == "" {
				what = names[i]
			}
			missing = append(missing, what)
		}
		return fmt.Errorf("%s needs %s: %s", cmd.CommandPath(), strings.Join(missing, " and "), usage)
	}
}
