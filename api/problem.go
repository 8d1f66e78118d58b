package api

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/wire"
)

// Problem is an RFC 9457 problem document, with the field errors that caused it.
type Problem struct {
	wire.Problem
	// retryAfter, if set, is sent as Retry-After (seconds).
	retryAfter int
}

// FieldError names one thing wrong with a request; its wire form is the client's.
type FieldError = wire.FieldError

// problemTypeBase prefixes the type URIs; each names a page of docs/errors.md.
const problemTypeBase = "https://hostedtrain.dev/problems/"

// unavailable is the problem of a request that reached Redis while it could not serve.
func unavailable() *Problem {
	p := newProblem(http.StatusServiceUnavailable, "unavailable", fmt.Sprintf(
		"the job store is unavailable for a moment; nothing was changed; try again in %d seconds", RetryAfterSeconds))
	p.retryAfter = RetryAfterSeconds
	return p
}

func newProblem(status int, slug, detail string) *Problem {
	return &Problem{Problem: wire.Problem{
		Type:   problemTypeBase + slug,
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
	}}
}

// writeProblem is the one place errors leave the API.
func writeProblem(w http.ResponseWriter, r *http.Request, p *Problem) {
	if r != nil && strings.HasPrefix(r.URL.Path, primePrefix) {
		writePrimeError(w, p, pointerLoc) // the Prime-compatible surface answers as the prime CLI reads
		return
	}
	if r != nil {
		p.Instance = r.URL.Path
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	if p.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.retryAfter))
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

var (
	unsupportedProperty = regexp.MustCompile(`^property "([^"]+)" is unsupported$`)
	missingProperty     = regexp.MustCompile(`^property "([^"]+)" is missing$`)
)

// body is a request body as read, for placing field errors in it.
type body struct {
	raw       []byte
	mediaType string
	pos       jobspec.Positions
	job       bool // a job file (submit, preview), not another request body
}

func (b *body) toml() bool { return strings.Contains(b.mediaType, "toml") }

// place sets the line and column of fe from its pointer, where the document says.
func (b *body) place(fe *FieldError) {
	if b == nil || fe.Pointer == "" || len(b.raw) == 0 {
		return
	}
	if b.pos == nil {
		if b.toml() {
			b.pos = jobspec.TOMLPositions(b.raw)
		} else {
			b.pos = jobspec.JSONPositions(b.raw)
		}
	}
	if p, ok := b.pos.Find(fe.Pointer); ok {
		fe.Line, fe.Column = p.Line, p.Column
	}
}

func (b *body) format() string {
	if b != nil && b.toml() {
		return "TOML"
	}
	return "JSON"
}

// hints knows the job schemas, to tell a user which kind a stray key belongs to.
type hints struct {
	kinds map[string]*openapi3.Schema
}

// validationProblem turns a kin-openapi request validation error into a problem: 400 for a
// body that does not parse or a bad parameter, 422 for a body that parses but breaks the
// schema.
func validationProblem(err error, b *body, h hints) *Problem {
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
		msg := schemaMessage(reqErr.Err)
		var se *openapi3.SchemaError
		if errors.As(reqErr.Err, &se) && (se.SchemaField == "pattern" || se.SchemaField == "enum") {
			if m, ok := se.Schema.Extensions["x-message"].(string); ok {
				msg = m
			}
		}
		p.Errors = []FieldError{{Parameter: reqErr.Parameter.Name, Message: msg}}
		return p
	}
	if errors.Is(reqErr.Err, openapi3filter.ErrInvalidRequired) {
		return newProblem(http.StatusBadRequest, "missing-body", "the request needs a body")
	}
	var parseErr *openapi3filter.ParseError
	if errors.As(reqErr.Err, &parseErr) {
		return jsonSyntaxProblem(parseErr, b)
	}
	fields := h.schemaErrors(reqErr.Err)
	if len(fields) == 0 {
		return newProblem(http.StatusBadRequest, "invalid-request", reqErr.Error())
	}
	for i := range fields {
		b.place(&fields[i])
	}
	if b == nil || !b.job {
		return invalidBody(fields)
	}
	return invalidJob(fields, b)
}

// invalidJob is the 422 for a job that parses but breaks the schema or a rule.
func invalidJob(fields []FieldError, b *body) *Problem {
	p := newProblem(http.StatusUnprocessableEntity, "invalid-job",
		fmt.Sprintf("the %s job does not validate: %d problem(s)", b.format(), len(fields)))
	p.Errors = inLineOrder(fields)
	return p
}

// inLineOrder puts problems in the order of the file: by line (those without one last, in the
// order found), then column, then pointer — the order a user fixes them in.
func inLineOrder(fields []FieldError) []FieldError {
	out := slices.Clone(fields)
	slices.SortStableFunc(out, func(a, b FieldError) int {
		la, lb := a.Line, b.Line
		if la == 0 {
			la = math.MaxInt
		}
		if lb == 0 {
			lb = math.MaxInt
		}
		if c := cmp.Compare(la, lb); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Column, b.Column); c != 0 {
			return c
		}
		return strings.Compare(a.Pointer, b.Pointer)
	})
	return out
}

// invalidBody is the 422 for any other request body that breaks the schema or a rule.
func invalidBody(fields []FieldError) *Problem {
	p := newProblem(http.StatusUnprocessableEntity, "invalid-body",
		fmt.Sprintf("the request body does not validate: %d problem(s)", len(fields)))
	p.Errors = fields
	return p
}

func jsonSyntaxProblem(pe *openapi3filter.ParseError, b *body) *Problem {
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
	if offset >= 0 && b != nil {
		fe.Line, fe.Column = lineColumn(b.raw, offset)
	}
	p := newProblem(http.StatusBadRequest, "malformed-body", "JSON syntax error: "+fe.Message)
	p.Errors = []FieldError{fe}
	return p
}

// lineColumn converts a byte offset into a 1-based line and column.
func lineColumn(raw []byte, offset int64) (int, int) {
	offset = min(offset, int64(len(raw)))
	line, col := 1, 1
	for _, c := range raw[:offset] {
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

// schemaErrors flattens kin-openapi's schema errors into field errors a person can act on,
// sorted by pointer.
func (h hints) schemaErrors(err error) []FieldError {
	var out []FieldError
	h.collect(err, &out)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Pointer < out[j].Pointer })
	return out
}

func (h hints) collect(err error, out *[]FieldError) {
	// A SchemaError unwraps to its cause, which for oneOf is the branches' MultiError: look
	// at the error's own type before unwrapping.
	se, ok := err.(*openapi3.SchemaError)
	if !ok {
		if multi, isMulti := err.(openapi3.MultiError); isMulti {
			for _, e := range multi {
				h.collect(e, out)
			}
			return
		}
		if !errors.As(err, &se) {
			return
		}
	}
	ptr := pointer(se.JSONPointer())
	switch se.SchemaField {
	case "oneOf":
		branches := oneOfBranches(se)
		if len(branches) == 1 { // a discriminator picked the branch: its errors are the story
			h.collect(branches[0], out)
			return
		}
		// The branches that failed for more than the value's type are the ones the user meant.
		var meant []error
		for _, b := range branches {
			if !typeMismatchAt(b, ptr) {
				meant = append(meant, b)
			}
		}
		if len(meant) == 1 {
			h.collect(meant[0], out)
			return
		}
		*out = append(*out, FieldError{Pointer: ptr, Message: "must be " + describeOneOf(se.Schema)})
	case "discriminator":
		*out = append(*out, FieldError{Pointer: ptr + "/kind", Message: `kind must be "rl", "gepa", "eval" or "fft"`})
	default:
		*out = append(*out, h.fieldError(se))
	}
}

func oneOfBranches(se *openapi3.SchemaError) []error {
	var branches openapi3.MultiError
	if se.Origin != nil && errors.As(se.Origin, &branches) {
		return branches
	}
	return nil
}

// typeMismatchAt reports whether a oneOf branch failed only because the value at ptr has
// another type than the branch wants.
func typeMismatchAt(err error, ptr string) bool {
	if multi, ok := err.(openapi3.MultiError); ok {
		if len(multi) != 1 {
			return false
		}
		err = multi[0]
	}
	se, ok := err.(*openapi3.SchemaError)
	return ok && se.SchemaField == "type" && pointer(se.JSONPointer()) == ptr
}

func describeOneOf(s *openapi3.Schema) string {
	var kinds []string
	for _, ref := range s.OneOf {
		if ref.Value == nil || ref.Value.Type == nil {
			continue
		}
		switch {
		case ref.Value.Type.Is("array"):
			kinds = append(kinds, "a list")
		case ref.Value.Type.Is("object"):
			kinds = append(kinds, "a table")
		case ref.Value.Type.Is("string"):
			kinds = append(kinds, "a string")
		default:
			kinds = append(kinds, "a "+ref.Value.Type.Slice()[0])
		}
	}
	if len(kinds) == 0 {
		return "one of the allowed forms"
	}
	return strings.Join(kinds, " or ")
}

func (h hints) fieldError(se *openapi3.SchemaError) FieldError {
	path := se.JSONPointer()
	msg := se.Reason
	switch {
	case unsupportedProperty.MatchString(se.Reason):
		key := unsupportedProperty.FindStringSubmatch(se.Reason)[1]
		msg = h.unknownKey(key, len(path) == 0, se.Schema)
		path = append(path, key)
	case missingProperty.MatchString(se.Reason):
		key := missingProperty.FindStringSubmatch(se.Reason)[1]
		msg = fmt.Sprintf("missing required key %q", key)
		if len(path) == 0 || path[len(path)-1] != key {
			path = append(path, key)
		}
	case se.SchemaField == "pattern" || se.SchemaField == "enum":
		if m, ok := se.Schema.Extensions["x-message"].(string); ok {
			msg = m
		}
	}
	return FieldError{Pointer: pointer(path), Message: msg}
}

// unknownKey says what a key the schema does not know might have meant: a near spelling of a
// known key, or the kind of job it belongs to.
func (h hints) unknownKey(key string, topLevel bool, s *openapi3.Schema) string {
	msg := fmt.Sprintf("unknown key %q", key)
	if s != nil {
		if best := closest(key, slices.Collect(maps.Keys(s.Properties))); best != "" {
			return msg + "; did you mean " + best + "?"
		}
	}
	if topLevel {
		var owners []string
		for kind, ks := range h.kinds {
			// A full fine-tune's keys are prime-rl's, and a file becomes one by its shape, not
			// by a key a user misplaced.
			if _, ok := ks.Properties[key]; ok && kind != jobspec.KindFFT {
				owners = append(owners, kind)
			}
		}
		sort.Strings(owners)
		if len(owners) > 0 {
			how := map[string]string{"rl": "hostedtrain train submit", "gepa": "hostedtrain gepa submit", "eval": "hostedtrain eval submit", "fft": "hostedtrain train submit"}
			return fmt.Sprintf("%s: it is a setting of %s jobs; submit such a file with `%s` (or set kind = %q)",
				msg, strings.Join(owners, " and "), how[owners[0]], owners[0])
		}
	}
	return msg
}

// closest is the known key nearest to key in spelling, or "" if none is near enough to be
// what the user meant.
func closest(key string, known []string) string {
	sort.Strings(known)
	best, bestD := "", len(key)
	for _, k := range known {
		d := editDistance(strings.ToLower(key), k)
		if d < bestD {
			best, bestD = k, d
		}
	}
	limit := max(1, len(key)/4)
	if bestD <= limit {
		return best
	}
	for _, k := range known { // a prefix of a known key: "rollouts" for rollouts_per_example
		if len(key) >= 4 && strings.HasPrefix(k, strings.ToLower(key)) {
			return k
		}
	}
	return ""
}

// editDistance is the Damerau-Levenshtein (optimal string alignment) distance.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
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
		b.WriteString(jobspec.EscapePointer(p))
	}
	return b.String()
}
