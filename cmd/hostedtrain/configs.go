package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/spf13/cobra"

	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/openapi"
)

// configOption is one key a job file may set.
type configOption struct {
	Section     string `json:"section"`
	Name        string `json:"name"`
	Type        string `json:"type"`
	Default     any    `json:"default,omitempty"`
	Description string `json:"description,omitempty"`
}

func newConfigsCmd() *cobra.Command {
	var output, kind string
	c := &cobra.Command{
		Use:   "configs",
		Short: "The keys a job file may set, with their types and defaults (from the API's contract)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			spec, err := openapi.Load()
			if err != nil {
				return err
			}
			schemas := spec.KindSchemas()
			s := schemas[kind]
			if s == nil {
				return fmt.Errorf("--kind %q: want one of %s", kind, strings.Join(slices.Sorted(func(yield func(string) bool) {
					for k := range schemas {
						if !yield(k) {
							return
						}
					}
				}), ", "))
			}
			opts := configOptions(s, "", 0)
			if output == "json" {
				printJSON(cmd.OutOrStdout(), map[string]any{"configs": opts})
				return nil
			}
			renderConfigs(cmd.OutOrStdout(), opts)
			return nil
		},
	}
	c.Flags().StringVar(&kind, "kind", jobspec.KindRL, "the job kind: rl, fft, gepa or eval")
	outputFlag(c, &output)
	return c
}

// configOptions flattens a job schema's properties: a table's keys under its section
// (`sampling.temperature`), a list of tables' under `env[]`.
func configOptions(s *openapi3.Schema, section string, depth int) []configOption {
	var out []configOption
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range s.Properties {
			if !yield(k) {
				return
			}
		}
	}) {
		ref := s.Properties[name]
		if ref == nil || ref.Value == nil {
			continue
		}
		p := ref.Value
		out = append(out, configOption{Section: section, Name: name, Type: typeOf(p), Default: p.Default, Description: firstLine(p.Description)})
		if depth >= 3 {
			continue
		}
		if sub, at := tableOf(p, join(section, name)); sub != nil {
			out = append(out, configOptions(sub, at, depth+1)...)
		}
	}
	return out
}

// tableOf is the table a key holds, if it holds one: itself, the table of its list (under
// `name[]`), or that of its first alternative that is one.
func tableOf(s *openapi3.Schema, at string) (*openapi3.Schema, string) {
	if len(s.Properties) > 0 {
		return s, at
	}
	if s.Items != nil && s.Items.Value != nil && len(s.Items.Value.Properties) > 0 {
		return s.Items.Value, at + "[]"
	}
	for _, r := range s.OneOf {
		if r != nil && r.Value != nil {
			if sub, a := tableOf(r.Value, at); sub != nil {
				return sub, a
			}
		}
	}
	return nil, ""
}

func join(section, name string) string {
	if section == "" {
		return name
	}
	return section + "." + name
}

// typeOf names a schema's type as a user reads it: integer, string (one of a, b), list of
// table, table, or the alternatives of a oneOf.
func typeOf(s *openapi3.Schema) string {
	var alts []string
	for _, group := range [][]*openapi3.SchemaRef{s.OneOf, s.AnyOf, s.AllOf} {
		for _, r := range group {
			if r != nil && r.Value != nil {
				alts = append(alts, typeOf(r.Value))
			}
		}
	}
	if len(alts) > 0 {
		return strings.Join(slices.Compact(alts), " | ")
	}
	t := "any"
	if s.Type != nil && len(*s.Type) > 0 {
		t = strings.Join(*s.Type, " | ")
	}
	switch {
	case t == "object":
		t = "table"
	case t == "array" && s.Items != nil && s.Items.Value != nil:
		t = "list of " + typeOf(s.Items.Value)
	}
	if len(s.Enum) > 0 {
		vals := make([]string, len(s.Enum))
		for i, v := range s.Enum {
			vals[i] = fmt.Sprint(v)
		}
		t += " (" + strings.Join(vals, ", ") + ")"
	}
	return t
}

// firstLine is a description's first sentence, on one line.
func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.Index(s, "\n\n"); i >= 0 {
		s = s[:i]
	}
	s = strings.Join(strings.Fields(s), " ")
	if i := strings.Index(s, ". "); i >= 0 {
		s = s[:i+1]
	}
	return s
}

// renderConfigs is `train configs`.
func renderConfigs(w io.Writer, opts []configOption) {
	t := table(w)
	fmt.Fprintln(t, "KEY\tTYPE\tDEFAULT\tWHAT")
	for _, o := range opts {
		def := "-"
		if o.Default != nil {
			def = fmt.Sprint(o.Default)
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\n", join(o.Section, o.Name), o.Type, def, o.Description)
	}
	t.Flush()
}
