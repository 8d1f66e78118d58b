package jobspec

import "fmt"

// MaxTOMLDepth bounds how deep a TOML job file nests, as the API bounds JSON (64): no job nests
// deeper than a few levels, and a file of a few kilobytes nested thousands deep cost seconds
// of CPU and gigabytes on the error path.
const MaxTOMLDepth = 64

// MaxTOMLKeys bounds the keys a TOML job file defines: every key written with `=` (a dotted
// key counts once) and every table header. The TOML parser takes time quadratic in the keys of
// one table (go-toml v2 looks each new key up among its table's keys one by one: 90,000 keys
// took 32 s), so a bound on the keys bounds the parse: 4,096 keys in one table parse in about
// 20 ms. The largest job upstream writes for users has about 150 keys.
const MaxTOMLKeys = 4096

// tomlShape is what the bytes of a TOML document say of its size before it is parsed.
type tomlShape struct {
	depth, depthLine int // how deep it nests, and the line where it is deepest
	keys, keysLine   int // how many keys it defines, and the line where the count went past the limit
}

// tomlDepth is how deep data nests, read from the bytes alone before any parser or walk sees
// them: a table header's dotted parts, a key's dotted parts (at the top and inside inline
// tables), and open arrays and inline tables. It may count a little more than the document
// holds, never less. It stops counting once past limit.
func tomlDepth(data []byte, limit int) (depth, line int) {
	s := scanTOML(data, limit, int(^uint(0)>>1))
	return s.depth, s.depthLine
}

// scanTOML reads a document's depth (as tomlDepth) and its keys (as MaxTOMLKeys counts them)
// from its bytes in one pass. It stops once the depth is past depthLimit or the keys past
// keyLimit. Like the depth, the keys may be counted a little over, never under.
func scanTOML(data []byte, depthLimit, keyLimit int) tomlShape {
	var (
		header   int    // the current [table] or [[array]]'s depth
		opens    []int  // for each open [ or {: the depth of the keys written inside it (0 for [)
		kinds    []byte // for each open one: '[' or '{'
		lineKey  int    // the top-level key's dotted parts on this line
		keyDots  int    // dots in the key being read
		inKey    = true
		atStart  = true // only white space since the line began
		lineNo   = 1
		maxDepth int
		line     int
		keys     int
	)
	current := func() int {
		d := header + lineKey + len(opens)
		for _, k := range opens {
			d += k
		}
		return d
	}
	note := func() bool {
		if d := current() + keyDots; d > maxDepth {
			maxDepth, line = d, lineNo
		}
		return maxDepth > depthLimit
	}
	shape := func() tomlShape {
		s := tomlShape{depth: maxDepth, depthLine: line, keys: keys}
		if keys > keyLimit {
			s.keysLine = lineNo
		}
		return s
	}
	// key counts one more key; it reports whether that is past the limit.
	key := func() bool {
		keys++
		return keys > keyLimit
	}
	// skipString moves past a string starting at i (its opening quote); i is left on the last
	// byte of the closing quote.
	skipString := func(i int) int {
		q := data[i]
		triple := i+2 < len(data) && data[i+1] == q && data[i+2] == q
		if triple {
			i += 3
			for ; i < len(data); i++ {
				switch {
				case data[i] == '\n':
					lineNo++
				case q == '"' && data[i] == '\\':
					i++
				case data[i] == q && i+2 < len(data) && data[i+1] == q && data[i+2] == q:
					i += 2
					for i+1 < len(data) && data[i+1] == q { // up to two more quotes belong to the string
						i++
					}
					return i
				}
			}
			return i
		}
		for i++; i < len(data); i++ {
			switch {
			case data[i] == '\n':
				return i - 1 // unterminated: the parser will say so
			case q == '"' && data[i] == '\\':
				i++
			case data[i] == q:
				return i
			}
		}
		return i
	}
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case c == '\n':
			lineNo++
			if len(opens) == 0 {
				lineKey, keyDots, inKey, atStart = 0, 0, true, true
			}
			continue
		case c == ' ' || c == '\t' || c == '\r':
			continue
		case c == '#':
			for i < len(data) && data[i] != '\n' {
				i++
			}
			i--
			continue
		case c == '"' || c == '\'':
			i = skipString(i)
			atStart = false
			continue
		}
		if atStart && c == '[' && len(opens) == 0 {
			// A table header: [a.b.c] or [[a.b]].
			header = 1
			if i+1 < len(data) && data[i+1] == '[' {
				header, i = 2, i+1
			}
			for i++; i < len(data) && data[i] != ']' && data[i] != '\n'; i++ {
				switch data[i] {
				case '.':
					header++
				case '"', '\'':
					i = skipString(i)
				}
			}
			for i+1 < len(data) && data[i+1] == ']' {
				i++
			}
			atStart = false
			if note() || key() {
				return shape()
			}
			continue
		}
		atStart = false
		if inKey {
			switch c {
			case '.':
				keyDots++
				if note() {
					return shape()
				}
			case '=':
				if key() {
					return shape()
				}
				if len(opens) == 0 {
					lineKey = keyDots + 1
				} else {
					opens[len(opens)-1] = max(opens[len(opens)-1], keyDots+1)
				}
				keyDots, inKey = 0, false
			}
			continue
		}
		switch c {
		case '[', '{':
			opens, kinds = append(opens, 0), append(kinds, c)
			inKey, keyDots = c == '{', 0
		case ']', '}':
			if len(opens) > 0 {
				opens, kinds = opens[:len(opens)-1], kinds[:len(kinds)-1]
			}
		case ',':
			// The next key of an inline table.
			if n := len(kinds); n > 0 && kinds[n-1] == '{' {
				inKey, keyDots = true, 0
			}
		}
		if note() {
			return shape()
		}
	}
	return shape()
}

// checkTOMLShape refuses a document nested deeper than MaxTOMLDepth or defining more than
// MaxTOMLKeys keys, before it is parsed.
func checkTOMLShape(data []byte) error {
	s := scanTOML(data, MaxTOMLDepth, MaxTOMLKeys)
	switch {
	case s.depth > MaxTOMLDepth:
		return &SyntaxError{Format: "TOML", Line: s.depthLine, Msg: fmt.Sprintf("nested deeper than %d levels", MaxTOMLDepth)}
	case s.keys > MaxTOMLKeys:
		return &SyntaxError{Format: "TOML", Line: s.keysLine, Msg: fmt.Sprintf("more than %d keys (a job file holds a few hundred at most)", MaxTOMLKeys)}
	}
	return nil
}
