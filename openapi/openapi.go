// Package openapi embeds the service's contract, openapi.yaml, loads and validates it once,
// and offers the router and validators built on it with kin-openapi.
//
// TOML bodies are validated against the same schemas as JSON: this package registers a body
// decoder for application/toml that turns a job file into the JSON-shaped value the schemas
// describe.
package openapi

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

//go:embed openapi.yaml
var document []byte

// documentJSON is openapi.yaml as JSON, which is what Load parses: half the cost of YAML at a
// function's cold start.
//
//go:generate go run ./internal/genjson
//go:embed openapi.json
var documentJSON []byte

// MediaTOML is the media type of job files.
const MediaTOML = "application/toml"

// KindHeader carries, from the API's middleware to the body decoders, the kind that a job
// file takes when it does not say: the `kind` query parameter, else rl. The discriminator of
// JobSubmission needs `kind` in the value; users' files rarely write it. The middleware sets
// this header on job-file requests only, overwriting any value a client sent.
const KindHeader = "Hostedtrain-Default-Kind"

func init() {
	openapi3filter.RegisterBodyDecoder(MediaTOML, decodeTOMLBody)
	openapi3filter.RegisterBodyDecoder("application/json", decodeJSONBody)
	openapi3filter.RegisterBodyDecoder("text/event-stream", decodeEventStream)
}

// decodeEventStream reads a Server-Sent Events stream as the list of its events' data, each
// JSON, so a stream's content is validated against the schema like any other answer.
// Comments and the id and event fields are skipped.
func decodeEventStream(r io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	out := []any{}
	for _, frame := range strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n\n") {
		var payload strings.Builder
		for _, line := range strings.Split(frame, "\n") {
			if d, ok := strings.CutPrefix(line, "data:"); ok {
				payload.WriteString(strings.TrimPrefix(d, " "))
			}
		}
		if payload.Len() == 0 {
			continue
		}
		var v any
		if err := json.Unmarshal([]byte(payload.String()), &v); err != nil {
			return nil, fmt.Errorf("event data is not JSON: %w", err)
		}
		out = append(out, v)
	}
	return out, nil
}

func decodeTOMLBody(r io.Reader, h http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	v, err := jobspec.DecodeTOML(data)
	if err != nil {
		return nil, err
	}
	withKind(v, h)
	return v, nil
}

func decodeJSONBody(r io.Reader, h http.Header, s *openapi3.SchemaRef, enc openapi3filter.EncodingFn) (any, error) {
	v, err := openapi3filter.JSONBodyDecoder(r, h, s, enc)
	if m, ok := v.(map[string]any); ok && err == nil {
		withKind(m, h)
	}
	return v, err
}

// withKind gives a job file without a kind the request's: a file the prime CLI would send
// down its full fine-tune path is a full fine-tune (fft) where the request's kind is rl, as
// `prime train` dispatches it.
func withKind(v map[string]any, h http.Header) {
	if k := h.Get(KindHeader); k != "" {
		if _, ok := v["kind"]; !ok {
			if k == jobspec.KindRL && jobspec.IsFullFinetune(v) {
				k = jobspec.KindFFT
			}
			v["kind"] = k
		}
	}
}

// Spec is the loaded contract and the router built from it.
type Spec struct {
	Doc    *openapi3.T
	Router routers.Router
}

var (
	loadOnce sync.Once
	loaded   *Spec
	loadErr  error
)

// Load parses the embedded document and builds its router, once per process.
func Load() (*Spec, error) {
	loadOnce.Do(func() {
		// Parsing makes a great deal of short-lived garbage; collecting it on the way costs a
		// cold start more time than the memory is worth. It is collected afterwards.
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(documentJSON)
		if err != nil {
			loadErr = fmt.Errorf("openapi: load: %w", err)
			return
		}
		// The document is not validated here: it is fixed at build time, and
		// TestTheDocumentIsValid validates these very bytes (2 ms of every cold start saved).
		router, err := gorillamux.NewRouter(doc)
		if err != nil {
			loadErr = fmt.Errorf("openapi: router: %w", err)
			return
		}
		loaded = &Spec{Doc: doc, Router: router}
	})
	return loaded, loadErr
}

// KindSchemas are the job schemas by kind, for telling users which kind a key belongs to.
func (s *Spec) KindSchemas() map[string]*openapi3.Schema {
	out := map[string]*openapi3.Schema{}
	for kind, name := range map[string]string{jobspec.KindRL: "RLJob", jobspec.KindGEPA: "GEPAJob", jobspec.KindEval: "EvalJob", jobspec.KindFFT: "FFTJob"} {
		if ref := s.Doc.Components.Schemas[name]; ref != nil {
			out[kind] = ref.Value
		}
	}
	return out
}

// YAML is the document as embedded, for serving.
func YAML() []byte { return bytes.Clone(document) }

// Scope is the scope an operation demands (its x-scope extension), or "" for none.
func Scope(op *openapi3.Operation) string {
	s, _ := op.Extensions["x-scope"].(string)
	return s
}

// RequestOptions are the validation options the API runs with. Authentication is done before
// validation, by the API's own middleware, so the filter's is a no-op.
func RequestOptions() *openapi3filter.Options {
	return &openapi3filter.Options{
		MultiError:         true,
		KeepValidatedValue: true,
		AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
	}
}

// ValidateResponse checks a recorded response against the operation it answers; the tests
// run it on every response they see.
func ValidateResponse(ctx context.Context, req *http.Request, status int, header http.Header, body []byte) error {
	s, err := Load()
	if err != nil {
		return err
	}
	route, params, err := s.Router.FindRoute(req)
	if err != nil {
		return fmt.Errorf("openapi: no route for %s %s: %w", req.Method, req.URL.Path, err)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status:  status,
		Header:  header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(body)
	return openapi3filter.ValidateResponse(ctx, in)
}
