package jobspec

import "testing"

func TestTOMLPositions(t *testing.T) {
	t.Parallel()
	doc := `# a comment
model = "m"
sampling.max_tokens = 5

[[env]]
id = "a"
args = { x = 1, nested = { y = 2 } }

[[env]]
id = "b"

[env.args]
z = 3

[eval]
interval = 5

[[eval.env]]
id = "c"

[wandb]
project = "p"
env_file = ["s.env"]
`
	pos := TOMLPositions([]byte(doc))
	cases := map[string]Position{
		"/model":                {2, 1},
		"/sampling":             {3, 1},
		"/sampling/max_tokens":  {3, 10},
		"/env":                  {5, 3},
		"/env/0":                {5, 3},
		"/env/0/id":             {6, 1},
		"/env/0/args/x":         {7, 10},
		"/env/0/args/nested/y":  {7, 28},
		"/env/1/id":             {10, 1},
		"/env/1/args/z":         {13, 1},
		"/eval/interval":        {16, 1},
		"/eval/env/0/id":        {19, 1},
		"/wandb/project":        {22, 1},
		"/env_file":             {23, 1}, // hoisted out of [wandb], as DecodeTOML does
		"/env/1/args/not_there": {12, 6}, // falls back to the nearest ancestor: [env.args]
	}
	for ptr, want := range cases {
		got, ok := pos.Find(ptr)
		if !ok || got != want {
			t.Errorf("%s: got %v (%v), want %v", ptr, got, ok, want)
		}
	}
	if _, ok := pos.Find("/nothing"); ok {
		t.Error("a top-level key that is not written has no position")
	}
}

func TestJSONPositions(t *testing.T) {
	t.Parallel()
	doc := "{\n  \"model\": \"m\",\n  \"env\": [\n    {\"id\": \"a\"},\n    {\"id\": \"b\", \"args\": {\"q\\\"k\": 1}}\n  ],\n  \"sampling\": {\"max_tokens\": 5}\n}"
	pos := JSONPositions([]byte(doc))
	cases := map[string]Position{
		"/model":               {2, 3},
		"/env/0/id":            {4, 6},
		"/env/1/id":            {5, 6},
		"/env/1/args/q\"k":     {5, 26},
		"/sampling/max_tokens": {7, 16},
	}
	for ptr, want := range cases {
		got, ok := pos.Find(ptr)
		if !ok || got != want {
			t.Errorf("%s: got %v (%v), want %v", ptr, got, ok, want)
		}
	}
}

func TestPositionsOfBrokenDocumentsDoNotPanic(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{"", "[", "a = ", "[[x]]\n[x", "{", `{"a": [1, {"b":`, "\x00\xff"} {
		TOMLPositions([]byte(doc))
		JSONPositions([]byte(doc))
	}
}
