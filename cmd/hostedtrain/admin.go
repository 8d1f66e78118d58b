package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostedtrain/hostedtrain/internal/auth"
)

func newAdminCmd() *cobra.Command {
	c := &cobra.Command{Use: "admin", Short: "Operator commands"}
	c.AddCommand(newTokenCmd())
	return c
}

// keysFile is where `hostedtrain dev` keeps its signing keys under --data.
const keysFile = "jwt-keys.json"

// loadKeys reads the signing keys: HOSTEDTRAIN_JWT_KEYS (kid=base64,...) as deployed, or
// DIR/jwt-keys.json of a local stack.
func loadKeys(dataDir string) (*auth.KeySet, error) {
	if v := os.Getenv("HOSTEDTRAIN_JWT_KEYS"); v != "" && dataDir == "" {
		return auth.ParseKeySet(v)
	}
	if dataDir == "" {
		return nil, errors.New("say where the keys are: --data DIR (a `hostedtrain dev` data folder) or HOSTEDTRAIN_JWT_KEYS")
	}
	return auth.LoadKeySetFile(filepath.Join(dataDir, keysFile))
}

func newTokenCmd() *cobra.Command {
	var dataDir, org, scopes, subject string
	var ttl time.Duration
	c := &cobra.Command{
		Use:   "token",
		Short: "Print a signed API token",
		Example: "  hostedtrain admin token --data .hostedtrain/dev --org acme --scopes jobs:read,jobs:write --ttl 24h\n" +
			"  scopes: " + strings.Join(auth.AllScopes, ", "),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			keys, err := loadKeys(dataDir)
			if err != nil {
				return err
			}
			var list []string
			for s := range strings.SplitSeq(scopes, ",") {
				if s = strings.TrimSpace(s); s != "" {
					list = append(list, s)
				}
			}
			if len(list) == 0 {
				return errors.New("--scopes is empty; known scopes: " + strings.Join(auth.AllScopes, ", "))
			}
			tok, err := keys.Issue(auth.TokenRequest{Subject: subject, Org: org, Scopes: list, TTL: ttl}, time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	c.Flags().StringVar(&dataDir, "data", "", "the data folder of a `hostedtrain dev` stack")
	c.Flags().StringVar(&org, "org", "", "the organization the token acts for (required)")
	c.Flags().StringVar(&scopes, "scopes", "jobs:read,jobs:write", "comma-separated scopes")
	c.Flags().StringVar(&subject, "subject", "", "who the token names (default: the organization; for agents, the agent id)")
	c.Flags().DurationVar(&ttl, "ttl", time.Hour, "lifetime")
	_ = c.MarkFlagRequired("org")
	return c
}
