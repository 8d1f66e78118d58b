package redisfn

import (
	"strings"
	"testing"
)

// A library refuses at build what would put a value in the wrong slot: a function with no
// argument list, a name twice or shadowing a common one, Rest anywhere but last; and a call
// refuses a missing, extra or unknown argument. The Lua a function opens with names each of
// its arguments at its place after the common ones.
func TestArgumentsByName(t *testing.T) {
	t.Parallel()
	spec := func(args map[string][]string) Spec {
		return Spec{Prefix: "t", Common: []string{"prefix", "now"}, Args: args, Bodies: map[string]string{"f": "return 1"}}
	}
	for name, args := range map[string]map[string][]string{
		"no list":       {},
		"a name twice":  {"f": {"id", "id"}},
		"a common name": {"f": {"now"}},
		"rest not last": {"f": {Rest, "id"}},
	} {
		if _, err := Build(spec(args)); err == nil {
			t.Errorf("%s: built", name)
		}
	}
	lib, err := Build(spec(map[string][]string{"f": {"id", "how", Rest}}))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lib.Source, "local arg_id = ARGV[3]\nlocal arg_how = ARGV[4]\nlocal REST = 5\n") ||
		!strings.HasPrefix(lib.Source, "#!lua name="+lib.Name+"\n") || !strings.Contains(lib.Source, "'"+lib.Name+"_f'") {
		t.Errorf("source:\n%s", lib.Source)
	}
	got, err := lib.Argv("f", []any{"p", 1}, map[string]any{"how": "x", "id": "j"}, []any{7, 8})
	if err != nil || len(got) != 6 || got[2] != "j" || got[3] != "x" || got[5] != 8 {
		t.Errorf("argv %v %v", got, err)
	}
	for name, call := range map[string]func() error{
		"a missing argument": func() error {
			_, err := lib.Argv("f", []any{"p", 1}, map[string]any{"id": "j", "hw": "x"}, nil)
			return err
		},
		"an extra argument": func() error {
			_, err := lib.Argv("f", []any{"p", 1}, map[string]any{"id": "j", "how": "x", "x": 1}, nil)
			return err
		},
		"an unknown function": func() error { _, err := lib.Argv("g", []any{"p", 1}, nil, nil); return err },
		"common args short": func() error {
			_, err := lib.Argv("f", []any{"p"}, map[string]any{"id": "j", "how": "x"}, nil)
			return err
		},
	} {
		if call() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
