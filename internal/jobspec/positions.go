package jobspec

import (
	"bytes"
	"encoding/json"
	"sort"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
)

// Position is a place in a document; Line and Column are 1-based.
type Position struct {
	Line   int
	Column int
}

// Positions maps the JSON pointers of a document's values to where their keys are written,
// so an error about /sampling/max_tokens can say "line 9".
type Positions map[string]Position

// Find returns the position of ptr, or of its nearest ancestor that has one (a missing key is
// reported at the table that should hold it).
func (p Positions) Find(ptr string) (Position, bool) {
	for {
		if pos, ok := p[ptr]; ok {
			return pos, true
		}
		i := strings.LastIndexByte(ptr, '/')
		if i <= 0 {
			return Position{}, false
		}
		ptr = ptr[:i]
	}
}

// lines turns byte offsets into positions.
type lines []int // offsets where each line starts

func newLines(data []byte) lines {
	ls := lines{0}
	for i, b := range data {
		if b == '\n' {
			ls = append(ls, i+1)
		}
	}
	return ls
}

func (ls lines) at(offset int) Position {
	i := sort.Search(len(ls), func(i int) bool { return ls[i] > offset }) - 1
	return Position{Line: i + 1, Column: offset - ls[i] + 1}
}

// TOMLPositions finds where each key of a TOML job file is written. It follows the same
// hoisting as DecodeTOML, so pointers match the decoded value. A document that does not parse
// yields what was read before the error.
func TOMLPositions(data []byte) Positions {
	if checkTOMLShape(data) != nil {
		return Positions{} // refused before any walk: DecodeTOML says why
	}
	w := tomlWalker{pos: Positions{}, lines: newLines(data), arrays: map[string]int{}}
	var p unstable.Parser
	p.Reset(data)
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table:
			names, offs := keyParts(&p, e.Key())
			w.current = w.resolve("", names, offs)
		case unstable.ArrayTable:
			names, offs := keyParts(&p, e.Key())
			parent := w.resolve("", names[:len(names)-1], offs)
			full := parent + "/" + escapePointer(names[len(names)-1])
			w.mark(full, offs[len(offs)-1])
			idx := w.arrays[full]
			w.arrays[full] = idx + 1
			w.current = full + "/" + strconv.Itoa(idx)
			w.mark(w.current, offs[len(offs)-1])
		case unstable.KeyValue:
			w.keyValue(&p, w.current, e)
		}
	}
	for _, k := range topLevelOnly {
		if _, ok := w.pos["/"+k]; ok {
			continue
		}
		for ptr, at := range w.pos {
			segs := strings.Split(ptr, "/")
			if segs[len(segs)-1] == k && len(segs) >= 3 && len(segs) <= 4 {
				w.pos["/"+k] = at
				break
			}
		}
	}
	return w.pos
}

type tomlWalker struct {
	pos     Positions
	lines   lines
	arrays  map[string]int // pointer of an array of tables → elements seen
	current string         // pointer of the table keys now land in
}

func (w *tomlWalker) mark(ptr string, offset int) {
	if _, ok := w.pos[ptr]; !ok {
		w.pos[ptr] = w.lines.at(offset)
	}
}

// resolve extends base by names; a name that is an array of tables continues in its newest
// element, as TOML does.
func (w *tomlWalker) resolve(base string, names []string, offs []int) string {
	ptr := base
	for i, n := range names {
		ptr += "/" + escapePointer(n)
		w.mark(ptr, offs[i])
		if c, ok := w.arrays[ptr]; ok {
			ptr += "/" + strconv.Itoa(c-1)
		}
	}
	return ptr
}

func (w *tomlWalker) keyValue(p *unstable.Parser, base string, e *unstable.Node) {
	names, offs := keyParts(p, e.Key())
	ptr := w.resolve(base, names, offs)
	w.value(p, ptr, e.Value())
}

func (w *tomlWalker) value(p *unstable.Parser, ptr string, v *unstable.Node) {
	switch v.Kind {
	case unstable.InlineTable:
		it := v.Children()
		for it.Next() {
			if kv := it.Node(); kv.Kind == unstable.KeyValue {
				w.keyValue(p, ptr, kv)
			}
		}
	case unstable.Array:
		it := v.Children()
		for i := 0; it.Next(); i++ {
			w.value(p, ptr+"/"+strconv.Itoa(i), it.Node())
		}
	}
}

func keyParts(p *unstable.Parser, it unstable.Iterator) ([]string, []int) {
	var names []string
	var offs []int
	for it.Next() {
		k := it.Node()
		names = append(names, string(k.Data))
		offs = append(offs, int(k.Raw.Offset))
	}
	return names, offs
}

// JSONPositions finds where each key of a JSON document is written. A document that does
// not parse yields what was read before the error.
func JSONPositions(data []byte) Positions {
	w := jsonWalker{dec: json.NewDecoder(bytes.NewReader(data)), data: data, lines: newLines(data), pos: Positions{}}
	w.value("")
	return w.pos
}

type jsonWalker struct {
	dec   *json.Decoder
	data  []byte
	lines lines
	pos   Positions
}

// value reads one value at ptr; it reports false once the document stops parsing.
func (w *jsonWalker) value(ptr string) bool {
	tok, err := w.dec.Token()
	if err != nil {
		return false
	}
	switch tok {
	case json.Delim('{'):
		for w.dec.More() {
			kt, err := w.dec.Token()
			if err != nil {
				return false
			}
			key, _ := kt.(string)
			p := ptr + "/" + escapePointer(key)
			w.pos[p] = w.lines.at(quoteStart(w.data, int(w.dec.InputOffset())))
			if !w.value(p) {
				return false
			}
		}
		_, err = w.dec.Token()
		return err == nil
	case json.Delim('['):
		for i := 0; w.dec.More(); i++ {
			if !w.value(ptr + "/" + strconv.Itoa(i)) {
				return false
			}
		}
		_, err = w.dec.Token()
		return err == nil
	}
	return true
}

// quoteStart finds the opening quote of the string token that ends at end.
func quoteStart(data []byte, end int) int {
	end = min(end, len(data))
	for i := end - 2; i >= 0; i-- {
		if data[i] == '"' && (i == 0 || data[i-1] != '\\') {
			return i
		}
	}
	return 0
}
