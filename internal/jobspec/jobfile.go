package jobspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// JobBody is a job ready to send: the file as the user wrote it (so the API's line numbers are
// the file's), with the secrets gathered for it added at the end.
type JobBody struct {
	Data        []byte
	ContentType string
	SecretNames []string
}

// ReadJobFile reads a job file and gathers its secrets, as `hostedtrain train submit` (and the
// prime CLI) do: the env files it names (`env_file`, `env_files`, resolved relative to the job
// file, and kept to the job file's folder) and then the -e flags (KEY=VALUE, or KEY from this
// environment), which win. The server never opens a path; the values travel in the body's
// `secrets`.
func ReadJobFile(path string, envFlags []string) (*JobBody, error) {
	return ReadJobFileWith(path, envFlags, ReadOptions{})
}

// ReadOptions change what ReadJobFileWith accepts.
type ReadOptions struct {
	// AllowOutsideEnvFile reads env files outside the job file's folder too (the CLI's
	// --allow-outside-env-file).
	AllowOutsideEnvFile bool
	// EnvFiles are secrets files named on the command line (--env-file), read after the ones
	// the job names and before -e flags, as the prime CLI orders them.
	EnvFiles []string
}

// ReadJobFileWith is ReadJobFile with options.
func ReadJobFileWith(path string, envFlags []string, opts ReadOptions) (*JobBody, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	isJSON := strings.EqualFold(filepath.Ext(path), ".json")
	var doc map[string]any
	if isJSON {
		err = json.Unmarshal(data, &doc)
	} else {
		doc, err = DecodeTOML(data)
	}
	if err != nil {
		// Let the API say what is wrong, with the line; there is nothing to gather.
		return &JobBody{Data: data, ContentType: contentType(isJSON)}, nil
	}
	secrets := map[string]string{}
	for _, f := range envFileNames(doc) {
		p, err := envFilePath(path, f, opts.AllowOutsideEnvFile)
		if err != nil {
			return nil, fmt.Errorf("%s names env file %q: %w", path, f, err)
		}
		vals, err := ReadEnvFile(p)
		if err != nil {
			return nil, fmt.Errorf("%s names env file %q: %w", path, f, err)
		}
		for k, v := range vals {
			secrets[k] = v
		}
	}
	for _, f := range opts.EnvFiles {
		vals, err := ReadEnvFile(f) // named on the command line: read where the user says
		if err != nil {
			return nil, fmt.Errorf("--env-file %s: %w", f, err)
		}
		for k, v := range vals {
			secrets[k] = v
		}
	}
	if err := ApplyEnvFlags(secrets, envFlags); err != nil {
		return nil, err
	}
	b := &JobBody{Data: data, ContentType: contentType(isJSON)}
	if err := b.addEndpoints(path, doc, isJSON); err != nil {
		return nil, err
	}
	data = b.Data
	if len(secrets) == 0 {
		return b, nil
	}
	if _, ok := doc["secrets"]; ok {
		return nil, fmt.Errorf("%s has its own secrets and also names env files or -e flags: keep secrets in one place", path)
	}
	for k := range secrets {
		b.SecretNames = append(b.SecretNames, k)
	}
	sort.Strings(b.SecretNames)
	if isJSON {
		b.Data, err = addJSONSecrets(data, doc, secrets)
	} else {
		b.Data, err = addTOMLSecrets(data, secrets)
	}
	return b, err
}

func contentType(isJSON bool) string {
	if isJSON {
		return "application/json"
	}
	return "application/toml"
}

// ApplyEnvFlags reads -e KEY=VALUE, or -e KEY to take KEY from this environment.
func ApplyEnvFlags(secrets map[string]string, flags []string) error {
	for _, f := range flags {
		k, v, hasValue := strings.Cut(f, "=")
		if k == "" {
			return fmt.Errorf("-e %q: want KEY=VALUE or KEY", f)
		}
		if !hasValue {
			var ok bool
			if v, ok = os.LookupEnv(k); !ok {
				return fmt.Errorf("-e %s: %s is not set in this environment; pass -e %s=VALUE", k, k, k)
			}
		}
		secrets[k] = v
	}
	return nil
}

// envFileNames lists the env files a decoded job names.
func envFileNames(doc map[string]any) []string {
	var out []string
	add := func(v any) {
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case []any:
			for _, e := range v {
				if s, ok := e.(string); ok {
					out = append(out, s)
				}
			}
		}
	}
	add(doc["env_file"])
	add(doc["env_files"])
	return out
}

// addTOMLSecrets appends a [secrets] table: a table header ends whatever table the file ended
// in, and every line the user wrote keeps its number.
func addTOMLSecrets(data []byte, secrets map[string]string) ([]byte, error) {
	table, err := toml.Marshal(map[string]map[string]string{"secrets": secrets})
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.Write(data)
	if len(data) > 0 && data[len(data)-1] != '\n' {
		b.WriteByte('\n')
	}
	b.WriteString("\n# added by hostedtrain: the values of env files and -e flags\n")
	b.Write(table)
	return b.Bytes(), nil
}

// addJSONSecrets adds "secrets" just before the object's closing brace, so the user's lines
// keep their numbers.
func addJSONSecrets(data []byte, doc map[string]any, secrets map[string]string) ([]byte, error) {
	end := bytes.LastIndexByte(data, '}')
	if end < 0 {
		return nil, errors.New("the JSON job is not an object")
	}
	val, err := json.Marshal(secrets)
	if err != nil {
		return nil, err
	}
	sep := ","
	if len(doc) == 0 {
		sep = ""
	}
	out := append([]byte{}, data[:end]...)
	out = append(out, []byte(sep+`"secrets":`)...)
	out = append(out, val...)
	return append(out, data[end:]...), nil
}

// addEndpoints inlines the endpoint registry a GEPA file names (endpoints_path, relative to the
// file, as verifiers' loader reads it) as `endpoints`, since the service cannot read the
// user's files: only its [[endpoint]] entries go (endpoint_id, model, url, key — the name of
// the key's variable, never a key).
func (b *JobBody) addEndpoints(path string, doc map[string]any, isJSON bool) error {
	p, _ := doc["endpoints_path"].(string)
	if p == "" || doc["endpoints"] != nil {
		return nil
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(filepath.Dir(path), p)
	}
	raw, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("%s names endpoints_path %q: %w", path, doc["endpoints_path"], err)
	}
	var reg struct {
		Endpoint []Endpoint `toml:"endpoint"`
	}
	if err := toml.Unmarshal(raw, &reg); err != nil {
		return fmt.Errorf("%s names endpoints_path %q, which is not an endpoint registry ([[endpoint]] tables): %v", path, doc["endpoints_path"], err)
	}
	if len(reg.Endpoint) == 0 {
		return nil // nothing to send: a model named by an alias is refused, naming the file
	}
	if isJSON {
		end := bytes.LastIndexByte(b.Data, '}')
		if end < 0 {
			return errors.New("the JSON job is not an object")
		}
		val, err := json.Marshal(reg.Endpoint)
		if err != nil {
			return err
		}
		b.Data = append(append(append(append([]byte{}, b.Data[:end]...), `,"endpoints":`...), val...), b.Data[end:]...)
		return nil
	}
	table, err := toml.Marshal(map[string][]Endpoint{"endpoints": reg.Endpoint})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	out.Write(b.Data)
	if len(b.Data) > 0 && b.Data[len(b.Data)-1] != '\n' {
		out.WriteByte('\n')
	}
	out.WriteString("\n# added by hostedtrain: the endpoint registry endpoints_path names\n")
	out.Write(table)
	b.Data = out.Bytes()
	return nil
}
