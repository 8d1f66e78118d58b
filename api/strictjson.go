package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// strictError is what checkJSON finds that encoding/json lets pass.
type strictError struct{ msg string }

func (e *strictError) Error() string { return e.msg }

// checkJSON refuses what encoding/json would quietly accept: an object that names a key twice
// (the last would win, unseen by whoever wrote the first), anything after the value, and
// nesting deeper than maxJSONDepth. It names where: a JSON pointer. JSON that does not parse
// is left to validation, which places the error by line and column.
func checkJSON(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	err := walkJSON(dec, nil, 0)
	if err == nil {
		if _, err = dec.Token(); errors.Is(err, io.EOF) {
			return nil
		}
		return &strictError{"there is more after the JSON value"}
	}
	var se *strictError
	if errors.As(err, &se) {
		return err
	}
	return nil
}

// maxJSONDepth bounds nesting: no request of the API nests deeper than a few levels, and a
// job's environment arguments not much more.
const maxJSONDepth = 64

// jsonPath is where walkJSON is, built as it descends and written out as a JSON pointer only
// for an error: most bodies have none, and a pointer string per key is most of what a check
// would allocate.
type jsonPath struct {
	parent *jsonPath
	key    string
	index  int // for an array element; key is "" then
	inArr  bool
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

func (p *jsonPath) String() string {
	if p == nil {
		return ""
	}
	if p.inArr {
		return p.parent.String() + "/" + strconv.Itoa(p.index)
	}
	return p.parent.String() + "/" + pointerEscaper.Replace(p.key)
}

func walkJSON(dec *json.Decoder, at *jsonPath, depth int) error {
	if depth > maxJSONDepth {
		return &strictError{fmt.Sprintf("%s: nested deeper than %d levels", at, maxJSONDepth)}
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		var seen map[string]bool
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := kt.(string)
			child := &jsonPath{parent: at, key: key}
			if seen[key] {
				return &strictError{fmt.Sprintf("%s: the key %q appears twice", child, key)}
			}
			if seen == nil {
				seen = make(map[string]bool, 8)
			}
			seen[key] = true
			if err := walkJSON(dec, child, depth+1); err != nil {
				return err
			}
		}
		_, err = dec.Token() // }
		return err
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := walkJSON(dec, &jsonPath{parent: at, index: i, inArr: true}, depth+1); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ]
		return err
	}
	return nil
}
