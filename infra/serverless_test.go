package infra

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

type serverlessFile struct {
	Provider struct {
		Runtime      string `yaml:"runtime"`
		Architecture string `yaml:"architecture"`
	} `yaml:"provider"`
	Functions map[string]struct {
		Handler string `yaml:"handler"`
		Role    string `yaml:"role"`
		Package struct {
			Artifact string `yaml:"artifact"`
		} `yaml:"package"`
		Environment map[string]any `yaml:"environment"`
	} `yaml:"functions"`
	Resources struct {
		Resources map[string]struct {
			Type       string `yaml:"Type"`
			Properties struct {
				Policies []struct {
					PolicyDocument struct {
						Statement []struct {
							Action any `yaml:"Action"`
						} `yaml:"Statement"`
					} `yaml:"PolicyDocument"`
				} `yaml:"Policies"`
			} `yaml:"Properties"`
		} `yaml:"Resources"`
	} `yaml:"resources"`
}

// serverless.yml deploys one function per folder of functions/, each from its own zip of
// `make lambda`, on provided.al2023/arm64, under a role of its own that names its actions.
func TestServerlessMatchesTheFunctions(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "serverless.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var sf serverlessFile
	if err := yaml.Unmarshal(b, &sf); err != nil {
		t.Fatal(err)
	}
	if sf.Provider.Runtime != "provided.al2023" || sf.Provider.Architecture != "arm64" {
		t.Errorf("provider runs %s on %s", sf.Provider.Runtime, sf.Provider.Architecture)
	}
	dirs, err := os.ReadDir(filepath.Join("..", "functions"))
	if err != nil {
		t.Fatal(err)
	}
	var folders []string
	for _, d := range dirs {
		if d.IsDir() && d.Name() != "internal" {
			folders = append(folders, d.Name())
		}
	}
	var declared []string
	roles := map[string]string{}
	for name, f := range sf.Functions {
		declared = append(declared, name)
		if f.Handler != "bootstrap" || f.Package.Artifact != "dist/lambda/"+name+".zip" {
			t.Errorf("%s: handler %q, artifact %q", name, f.Handler, f.Package.Artifact)
		}
		if f.Role == "" || roles[f.Role] != "" {
			t.Errorf("%s: role %q is missing or shared with %s", name, f.Role, roles[f.Role])
		}
		roles[f.Role] = name
		for k, v := range f.Environment {
			if s, ok := v.(string); ok && strings.Contains(k, "KEYS") && !strings.HasSuffix(k, "_SECRET") {
				t.Errorf("%s: %s=%q puts a secret in the function's configuration", name, k, s)
			}
		}
	}
	slices.Sort(folders)
	slices.Sort(declared)
	if !slices.Equal(folders, declared) {
		t.Errorf("functions/ has %v, serverless.yml deploys %v", folders, declared)
	}
	wildcard := regexp.MustCompile(`^(\*|[a-z0-9]+:\*)$`)
	for name, r := range sf.Resources.Resources {
		if r.Type != "AWS::IAM::Role" {
			continue
		}
		for _, p := range r.Properties.Policies {
			for _, st := range p.PolicyDocument.Statement {
				actions, _ := st.Action.([]any)
				if s, ok := st.Action.(string); ok {
					actions = []any{s}
				}
				for _, a := range actions {
					if s, _ := a.(string); wildcard.MatchString(s) {
						t.Errorf("%s allows %s", name, s)
					}
				}
			}
		}
	}
}
