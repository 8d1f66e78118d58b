package openapi

import (
	"bytes"
	"testing"

	"github.com/oasdiff/yaml"
)

// openapi.json is what the API loads; it must be openapi.yaml's JSON form.
func TestJSONIsTheYAML(t *testing.T) {
	want, err := yaml.YAMLToJSON(document)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(documentJSON), want) {
		t.Fatal("openapi.json is stale: run `go generate ./openapi` and commit it")
	}
}
