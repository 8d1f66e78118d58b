package openapi

import (
	"bytes"
	"context"
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

// Load does not validate the document at run time; this does, on the bytes it loads.
func TestTheDocumentIsValid(t *testing.T) {
	spec, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.Doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
}
