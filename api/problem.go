package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

// Problem is an RFC 9457 problem document, with the field errors that caused it.
type Problem struct {
	Type     string       `json:"type"`
	Title    string       `json:"title"`
	Status   int          `json:"status"`
	Detail   string       `json:"detail,omitempty"`
	Instance string       `json:"instance,omitempty"`
	Errors   []FieldError `json:"errors,omitempty"`
}

// FieldError names one thing wrong with a request: a body field by JSON pointer (and its
// place in the TOML or JSON document where known) or a parameter.
type FieldError struct {
	Pointer   string `json:"pointer,omitempty"`
	Parameter string `json:"parameter,omitempty"`
	Line      int    `json:"line,omitempty"`
	Column    int    `json:"column,omitempty"`
	Message   string `json:"message"`
}

// problemTypeBase prefixes the type URIs; each names a page of docs/errors.md.
const problemTypeBase = "https://hostedtrain.dev/problems/"

func newProblem(status int, slug, detail string) *Problem {
	return &Problem{
		Type:   problemTypeBase + slug,
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
	}
}

// writeProblem is the one place errors leave the API.
func writeProblem(w http.ResponseWriter, r *http.Request, p *Problem) {
	if r != nil {
		p.Instance = r.URL.Path
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

var unsupportedProperty = regexp.MustCompile(`^property "([^"]+)" is unsupported$`)

// validationProblem turns a kin-openapi request validation error into a problem: 400 for a
// body that does not parse or a bad parameter, 422 for a body that parses but breaks the
// schema.
func validationProblem(err error, body []byte, mediaType string) *Problem {
	var syn *jobspec.SyntaxError
	if errors.As(err, &syn) {
		p := newProblem(http.StatusBadRequest, "malformed-body", syn.Error())
		p.Errors = []FieldError{{Line: syn.Line, Column: syn.Column, Message: syn.Msg}}
		return p
	}
	var reqErr *openapi3filter.RequestError
	if !errors.As(err, &reqErr) {
		return newProblem(http.StatusBadRequest, "invalid-request", err.Error())
	}
	if reqErr.Parameter != nil {
		p := newProblem(http.StatusBadRequest, "invalid-parameter",
			fmt.Sprintf("%s parameter %q is invalid", reqErr.Parameter.In, reqErr.Parameter.Name))
		p.Errors = []FieldError{{Parameter: reqErr.Parameter.Name, Message: schemaMessage(reqErr.Err)}}
		return p
	}
	if errors.Is(reqErr.Err, openapi3filter.ErrInvalidRequired) {
		return newProblem(http.StatusBadRequest, "missing-body", "the request needs a body")
	}
	var parseErr *openapi3filter.ParseError
	if errors.As(reqErr.Err, &parseErr) {
		return jsonSyntaxProblem(parseErr, body)
	}
	fields := schemaErrors(reqErr.Err)
	if len(fields) == 0 {
		return newProblem(http.StatusBadRequest, "invalid-request", reqErr.Error())
	}
	p := newProblem(http.StatusUnprocessableEntity, "invalid-job",
		fmt.Sprintf("the %s body does not match the schema: %d problem(s)", bodyFormat(mediaType), len(fields)))
	p.Errors = fields
	return p
}

func bodyFormat(mediaType string) string {
	if strings.Contains(mediaType, "toml") {
		return "TOML"
	}
	return "JSON"
}

func jsonSyntaxProblem(pe *openapi3filter.ParseError, body []byte) *Problem {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	fe := FieldError{Message: pe.Error()}
	var offset int64 = -1
	switch {
	case errors.As(pe, &syn):
		offset, fe.Message = syn.Offset, syn.Error()
	case errors.As(pe, &typ):
		offset, fe.Message = typ.Offset, typ.Error()
	}
	if offset >= 0 {
		fe.Line, fe.Column = lineColumn(body, offset)
	}
	p := newProblem(http.StatusBadRequest, "malformed-body", "JSON syntax error: "+fe.Message)
	p.Errors = []FieldError{fe}
	return p
}

// lineColumn converts a byte offset into a 1-based line and column.
func lineColumn(body []byte, offset int64) (int, int) {
	if offset > int64(len(body)) {
		offset = int64(len(body))
	}
	line, col := 1, 1
	for _, b := range body[:offset] {
		if b == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// schemaErrors flattens kin-openapi's schema errors into field errors, sorted by pointer.
func schemaErrors(err error) []FieldError {
	var out []FieldError
	var walk func(error)
	walk = func(err error) {
		var multi openapi3.MultiError
		if errors.As(err, &multi) {
			for _, e := range multi {
				walk(e)
			}
			return
		}
		var se *openapi3.SchemaError
		if errors.As(err, &se) {
			out = append(out, fieldError(se))
		}
	}
	walk(err)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Pointer < out[j].Pointer })
	return out
}

func fieldError(se *openapi3.SchemaError) FieldError {
	path := se.JSONPointer()
	msg := se.Reason
	if m := unsupportedProperty.FindStringSubmatch(se.Reason); m != nil {
		// kin-openapi points at the object; the user wants the key it does not know.
		path = append(path, m[1])
		msg = fmt.Sprintf("unknown key %q", m[1])
	}
	return FieldError{Pointer: pointer(path), Message: msg}
}

func schemaMessage(err error) string {
	var se *openapi3.SchemaError
	if errors.As(err, &se) {
		return se.Reason
	}
	if err == nil {
		return "invalid"
	}
	return err.Error()
}

// pointer renders path segments as an RFC 6901 JSON pointer.
func pointer(path []string) string {
	var b strings.Builder
	for _, p := range path {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(p))
	}
	return b.String()
}
