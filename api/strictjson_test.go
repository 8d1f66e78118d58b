package api

import "testing"

func TestCheckJSONNamesWhereAKeyRepeats(t *testing.T) {
	for body, want := range map[string]string{
		`{"a":{"b/c":[1,{"x":1,"x":2}]}}`: `/a/b~1c/1/x: the key "x" appears twice`,
		`{"m~n":1,"m~n":2}`:               `/m~0n: the key "m~n" appears twice`,
		`{"a":1} {}`:                      `there is more after the JSON value`,
	} {
		err := checkJSON([]byte(body))
		if err == nil || err.Error() != want {
			t.Errorf("checkJSON(%s) = %v, want %q", body, err, want)
		}
	}
	if err := checkJSON([]byte(`{"a":[{"x":1},{"x":2}],"b":{"x":3}}`)); err != nil {
		t.Errorf("the same key in sibling objects: %v", err)
	}
}
