package openapi

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/oasdiff/yaml"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/webhook"
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

// The contract's failure classes and faults are the ones the service writes.
func TestFailureEnumsAreTheService(t *testing.T) {
	spec, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	props := spec.Doc.Components.Schemas["FailureAnalysis"].Value.Properties
	enum := func(name string) []string {
		var out []string
		for _, v := range props[name].Value.Enum {
			out = append(out, v.(string))
		}
		return out
	}
	var classes []string
	for _, c := range job.FailureClasses {
		classes = append(classes, string(c))
	}
	if got := enum("class"); !slices.Equal(got, classes) {
		t.Errorf("contract classes %v; the service's %v", got, classes)
	}
	faults := []string{string(job.FaultPlatform), string(job.FaultUser), string(job.FaultUnknown)}
	if got := enum("fault"); !slices.Equal(got, faults) {
		t.Errorf("contract faults %v; the service's %v", got, faults)
	}
}

// The webhook events the contract lets an endpoint subscribe to are the ones the service takes.
func TestWebhookEventsAreTheService(t *testing.T) {
	spec, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range spec.Doc.Components.Schemas["WebhookEvents"].Value.Items.Value.Enum {
		got = append(got, v.(string))
	}
	want := append(slices.Clone(webhook.EventTypes), webhook.EventAll)
	if !slices.Equal(got, want) {
		t.Errorf("contract %v; the service %v", got, want)
	}
}
