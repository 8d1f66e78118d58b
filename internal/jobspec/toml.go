package jobspec

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// SyntaxError is a document that does not parse, with the place it stopped making sense.
// Line and Column are 1-based; zero when the decoder could not tell.
type SyntaxError struct {
	Format string // "TOML" or "JSON"
	Line   int
	Column int
	Msg    string
}

func (e *SyntaxError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s syntax error at line %d, column %d: %s", e.Format, e.Line, e.Column, e.Msg)
	}
	return fmt.Sprintf("%s syntax error: %s", e.Format, e.Msg)
}

// DecodeTOML parses a TOML job file into the JSON-shaped value (maps, slices, strings,
// float64/int64, bools) that the OpenAPI schema validates, so TOML and JSON bodies meet the
// same schema. TOML dates and times become RFC 3339 strings.
func DecodeTOML(data []byte) (map[string]any, error) {
	if err := checkTOMLShape(data); err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			line, col := de.Position()
			return nil, &SyntaxError{Format: "TOML", Line: line, Column: col, Msg: trimTOMLPrefix(de.Error())}
		}
		return nil, &SyntaxError{Format: "TOML", Msg: err.Error()}
	}
	if doc == nil {
		doc = map[string]any{}
	}
	doc = jsonShape(doc).(map[string]any)
	hoistTopLevelKeys(doc)
	return doc, nil
}

// topLevelOnly are keys that only mean something at the top of a job file.
var topLevelOnly = []string{"env_file", "env_files"}

// hoistTopLevelKeys moves keys that belong at the top level out of the table they landed in.
// TOML puts every key written after a `[table]` header into that table, and the Hosted Training docs' own
// reference file writes `env_file = [...]` after `[wandb]`; its authors meant the top level,
// and so does everyone who copies it.
func hoistTopLevelKeys(doc map[string]any) {
	for name, v := range doc {
		if slices.Contains(topLevelOnly, name) {
			continue
		}
		var table map[string]any
		switch v := v.(type) {
		case map[string]any:
			table = v
		case []any: // an array of tables: keys after it land in its last element
			if len(v) > 0 {
				table, _ = v[len(v)-1].(map[string]any)
			}
		}
		if table == nil {
			continue
		}
		for _, k := range topLevelOnly {
			if x, ok := table[k]; ok {
				if _, taken := doc[k]; !taken {
					doc[k] = x
					delete(table, k)
				}
			}
		}
	}
}

func trimTOMLPrefix(s string) string {
	const p = "toml: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// jsonShape rewrites the values go-toml produces that JSON has no form for.
func jsonShape(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = jsonShape(e)
		}
		return v
	case []any:
		for i, e := range v {
			v[i] = jsonShape(e)
		}
		return v
	case []map[string]any: // arrays of tables
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = jsonShape(e)
		}
		return out
	case time.Time:
		return v.Format(time.RFC3339Nano)
	case toml.LocalDate, toml.LocalTime, toml.LocalDateTime:
		return fmt.Sprint(v)
	default:
		return v
	}
}
