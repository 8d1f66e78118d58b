package main

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/client"
)

// The CLI's plain-language messages, pinned: a missing argument, an address without a scheme,
// a 503's Retry-After, a TOML syntax error said once, problems in the order of the file.
func TestGoldenMessages(t *testing.T) {
	var b bytes.Buffer
	root := newRoot()
	for _, args := range [][]string{{"train", "submit"}, {"train", "get"}, {"train", "get", "a", "b"}, {"webhook", "redeliver", "x"},
		{"admin", "nodes", "cordon"}, {"eval", "submit"}} {
		root.SetArgs(args)
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&bytes.Buffer{})
		fmt.Fprintf(&b, "%v: %v\n", args, root.Execute())
	}
	for _, raw := range []string{"train.example.com", "localhost:8080", "127.0.0.1:8080", "[::1]:8080", "https://train.example.com/",
		"ftp://x", "http://"} {
		u, err := apiURL(raw)
		fmt.Fprintf(&b, "%q -> %q %v\n", raw, u, err)
	}
	for _, e := range []*client.Error{
		{Status: 503, RetryAfter: 5 * time.Second, Problem: client.Problem{Detail: "object storage is unavailable for a moment; nothing was changed; try again in 5 seconds"}},
		{Status: 503, RetryAfter: 30 * time.Second, Problem: client.Problem{Detail: "overloaded"}},
		{Status: 400, Problem: client.Problem{Detail: "TOML syntax error at line 2, column 13: unexpected character U+003D '=' at start of value",
			Errors: []client.FieldError{{Line: 2, Column: 13, Message: "unexpected character U+003D '=' at start of value"}}}},
	} {
		fmt.Fprintf(&b, "%s\n", explain(e))
	}
	golden(t, "messages.txt", b.Bytes())
}
