package jobspec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A TOML job file nested deeper than MaxTOMLDepth is refused from its bytes, before any parser
// or walk sees it (issue 14: 8,000 deep cost seconds of CPU on the error path), in every way
// TOML nests; one nested to the limit is read.
func TestDeepTOMLIsRefusedBeforeParsing(t *testing.T) {
	t.Parallel()
	const n = 8000
	deep := map[string]string{
		"inline tables":      "a = " + strings.Repeat("{b=", n) + "1" + strings.Repeat("}", n),
		"arrays":             "a = " + strings.Repeat("[", n) + "1" + strings.Repeat("]", n),
		"arrays, unclosed":   "a = " + strings.Repeat("[", n),
		"dotted keys":        strings.Repeat("a.", n) + "b = 1",
		"numeric dotted":     strings.Repeat("1.", n) + "2 = 1",
		"quoted dotted keys": strings.Repeat(`"a".`, n) + "b = 1",
		"table header":       "[" + strings.Repeat("a.", n) + "b]\nc = 1",
		"array of tables":    "[[" + strings.Repeat("a.", n) + "b]]\nc = 1",
		"inline dotted keys": "a = {" + strings.Repeat("b.", n) + "c = 1}",
		"mixed":              "[" + strings.Repeat("t.", 30) + "u]\n" + strings.Repeat("k.", 30) + "v = " + strings.Repeat("[", 10) + strings.Repeat("]", 10),
	}
	for name, doc := range deep {
		d, _ := tomlDepth([]byte(doc), MaxTOMLDepth)
		if d <= MaxTOMLDepth {
			t.Errorf("%s: counted %d levels", name, d)
		}
		_, err := DecodeTOML([]byte(doc))
		var se *SyntaxError
		if !errors.As(err, &se) || !strings.Contains(se.Msg, "nested deeper than 64") {
			t.Errorf("%s: %v, want the depth refusal", name, err)
		}
	}
	// To the limit, strings holding brackets and dots, and comments, are read as they are.
	fine := map[string]string{
		"64 arrays":         "a = " + strings.Repeat("[", 63) + "1" + strings.Repeat("]", 63),
		"brackets in text":  `a = "[[[[{{{{ a.b.c.d" ` + "\n" + `b = '[[[[' # [[[[[ a.b.c` + "\n" + `c = """` + "\n" + strings.Repeat("[{.", 200) + `"""`,
		"a long flat array": "a = [" + strings.Repeat("1.5, ", 100000) + "2]",
	}
	for name, doc := range fine {
		if d, _ := tomlDepth([]byte(doc), MaxTOMLDepth); d > MaxTOMLDepth {
			t.Errorf("%s: counted %d levels", name, d)
		}
		if _, err := DecodeTOML([]byte(doc)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Every job file of the project's and the users' fixtures is counted well under the limit.
func TestFixturesAreWellUnderTheTOMLDepthLimit(t *testing.T) {
	t.Parallel()
	var files []string
	for _, glob := range []string{"../../testdata/jobs/*.toml", "../../examples/*.toml", "../../../shared/fixtures/jobs/*.toml", "../../../shared/upstream/real-configs/*/*.toml"} {
		m, _ := filepath.Glob(glob)
		files = append(files, m...)
	}
	if len(files) < 10 {
		t.Fatalf("found only %d job files", len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if d, line := tomlDepth(data, MaxTOMLDepth); d > 16 {
			t.Errorf("%s: counted %d levels (line %d)", f, d, line)
		}
	}
}

// A TOML job file with more than MaxTOMLKeys keys is refused from its bytes, before the parser
// (quadratic in the keys of one table) sees it, however the keys are written; the limit itself
// is read, and every job file users and upstream write is far under it.
func TestTOMLWithTooManyKeysIsRefusedBeforeParsing(t *testing.T) {
	t.Parallel()
	many := func(n int, line func(i int) string) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(line(i))
		}
		return b.String()
	}
	n := MaxTOMLKeys + 1
	over := map[string]string{
		"one table":       "[env.args]\n" + many(n, func(i int) string { return fmt.Sprintf("k%d = %d\n", i, i) }),
		"dotted keys":     many(n, func(i int) string { return fmt.Sprintf("a.k%d.x = 1\n", i) }),
		"table headers":   many(n, func(i int) string { return fmt.Sprintf("[a.t%d]\n", i) }),
		"an inline table": "a = {" + many(n, func(i int) string { return fmt.Sprintf("k%d = 1, ", i) }) + "z = 1}",
		"quoted keys":     many(n, func(i int) string { return fmt.Sprintf("\"k = %d\" = 1\n", i) }),
	}
	for name, doc := range over {
		_, err := DecodeTOML([]byte(doc))
		var se *SyntaxError
		if !errors.As(err, &se) || !strings.Contains(se.Msg, fmt.Sprintf("more than %d keys", MaxTOMLKeys)) || se.Line == 0 {
			t.Errorf("%s: %v, want the key-count refusal with a line", name, err)
		}
	}
	// '=' inside strings and comments is no key.
	atLimit := many(MaxTOMLKeys-1, func(i int) string { return fmt.Sprintf("k%d = \"a = b\" # c = d\n", i) }) + "s = '''\n" + strings.Repeat("x = 1\n", 100) + "'''\n"
	if s := scanTOML([]byte(atLimit), MaxTOMLDepth, MaxTOMLKeys); s.keys != MaxTOMLKeys {
		t.Errorf("counted %d keys, want %d", s.keys, MaxTOMLKeys)
	}
	if _, err := DecodeTOML([]byte(atLimit)); err != nil {
		t.Errorf("a file at the limit: %v", err)
	}
}

// BenchmarkDecodeLargestTOML decodes the costliest TOML job file the API accepts: MaxTOMLKeys
// keys in one table (make bench-jobs; docs/performance.md).
func BenchmarkDecodeLargestTOML(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("model = \"Qwen/Qwen3-0.6B\"\n[[env]]\nid = \"reverse-text\"\n[env.args]\n")
	for i := range MaxTOMLKeys - 4 {
		fmt.Fprintf(&sb, "key_number_%d = %d\n", i, i)
	}
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := DecodeTOML(data); err != nil {
			b.Fatal(err)
		}
	}
}
