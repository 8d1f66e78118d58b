// Package redisfn is how the service writes Redis scripts: each part's operations are one
// Redis Functions library (Redis 7) whose functions take their arguments by name. Go passes a
// map; Call puts it in the order the library's argument list gives, after the arguments every
// function of the library takes first; the Lua function finds each as a local arg_<name>,
// generated from the same list. A name missing on either side is an error at the call, not a
// value in the wrong slot. A library's shared helpers are built once, when it loads, not on
// every call as with EVAL.
//
// A library's name carries a hash of its source, so two versions of the service running side
// by side (a rolling deploy) call their own functions and never replace each other's; it is
// loaded on every master where it is missing (a new server, a new cluster node, a restart
// without persistence), once, when a call finds a function missing.
package redisfn

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Rest ends a function's argument list when it takes a variable number of values last: Lua
// finds them from ARGV[REST] on.
const Rest = "..."

// Spec is a library to build.
type Spec struct {
	// Prefix starts the library's name ("hostedtrain": hostedtrain_<hash>).
	Prefix string
	// Header is the Lua before the functions: generated key names, the shared helpers and
	// a begin(keys, args) that every function calls first.
	Header string
	// Common are the arguments every function takes first, by name; Args each function's
	// own, in order.
	Common []string
	Args   map[string][]string
	// Bodies are the functions' Lua, by name.
	Bodies map[string]string
	// Register is the Lua that registers one function, registered as name (the library's
	// placeholder, replaced by its full name), opening with argsLua (its arguments as locals)
	// then body. nil: begin(keys, args), then the body.
	Register func(name, argsLua, body string) string
}

// Library is a built library: its name and source, and how its functions take arguments.
type Library struct {
	Name   string
	Source string
	common []string
	args   map[string][]string
}

// Build builds a library, checking that every function has its argument list and that no
// list names an argument twice or shadows a common one.
func Build(s Spec) (Library, error) {
	names := slices.Sorted(maps.Keys(s.Bodies)) // a stable order: the hash depends on the code alone
	for _, fn := range names {
		list, ok := s.Args[fn]
		if !ok {
			return Library{}, fmt.Errorf("redisfn: function %s has no argument list", fn)
		}
		for i, n := range list {
			if slices.Contains(list[:i], n) || slices.Contains(s.Common, n) {
				return Library{}, fmt.Errorf("redisfn: function %s names %s twice", fn, n)
			}
			if n == Rest && i != len(list)-1 {
				return Library{}, fmt.Errorf("redisfn: function %s: %s must come last", fn, Rest)
			}
		}
	}
	register := s.Register
	if register == nil {
		register = func(name, argsLua, body string) string {
			return fmt.Sprintf("\nredis.register_function('%s', function(keys, args)\nbegin(keys, args)\n%s%s\nend)\n", name, argsLua, body)
		}
	}
	var body strings.Builder
	body.WriteString(s.Header)
	for _, fn := range names {
		body.WriteString(register("@_"+fn, argsLua(len(s.Common), s.Args[fn]), s.Bodies[fn]))
	}
	sum := sha1.Sum([]byte(body.String()))
	name := s.Prefix + "_" + hex.EncodeToString(sum[:6])
	src := "#!lua name=" + name + "\n" + strings.ReplaceAll(body.String(), "'@_", "'"+name+"_")
	return Library{Name: name, Source: src, common: s.Common, args: s.Args}, nil
}

// MustBuild is Build for a library known at compile time.
func MustBuild(s Spec) Library {
	l, err := Build(s)
	if err != nil {
		panic(err)
	}
	return l
}

// argsLua opens a function: its own arguments as locals after the common ones, and REST, the
// index of the first further value, for a function that takes them.
func argsLua(common int, list []string) string {
	var b strings.Builder
	for i, n := range list {
		pos := common + i + 1
		if n == Rest {
			fmt.Fprintf(&b, "local REST = %d\n", pos)
			continue
		}
		fmt.Fprintf(&b, "local arg_%s = ARGV[%d]\n", n, pos)
	}
	return b.String()
}

// Argv is a call's arguments in order: the common ones (in Common's order), the function's
// own from a, then rest (a variadic function's further values).
func (l Library) Argv(fn string, common []any, a map[string]any, rest []any) ([]any, error) {
	names, ok := l.args[fn]
	if !ok {
		return nil, fmt.Errorf("redisfn: no function %q", fn)
	}
	if len(common) != len(l.common) {
		return nil, fmt.Errorf("redisfn: %s: %d common arguments, want %d (%s)", fn, len(common), len(l.common), strings.Join(l.common, ", "))
	}
	own := names
	variadic := len(names) > 0 && names[len(names)-1] == Rest
	if variadic {
		own = names[:len(names)-1]
	} else if len(rest) > 0 {
		return nil, fmt.Errorf("redisfn: %s takes no further values", fn)
	}
	if len(a) != len(own) {
		return nil, fmt.Errorf("redisfn: %s: %d arguments, want %d (%s)", fn, len(a), len(own), strings.Join(own, ", "))
	}
	out := make([]any, 0, len(common)+len(own)+len(rest))
	out = append(out, common...)
	for _, n := range own {
		v, ok := a[n]
		if !ok {
			return nil, fmt.Errorf("redisfn: %s: argument %s missing", fn, n)
		}
		out = append(out, v)
	}
	return append(out, rest...), nil
}

// Caller calls a library's functions on one Redis (a server or a cluster), loading it where a
// call finds it missing.
type Caller struct {
	rdb redis.UniversalClient
	lib Library
	mu  sync.Mutex
}

// NewCaller calls lib's functions on rdb.
func NewCaller(rdb redis.UniversalClient, lib Library) *Caller { return &Caller{rdb: rdb, lib: lib} }

// Call runs fn, routed by route, with its arguments by name after the common ones.
func (c *Caller) Call(ctx context.Context, fn, route string, common []any, a map[string]any, rest ...any) *redis.Cmd {
	full, err := c.lib.Argv(fn, common, a, rest)
	if err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	cmd := c.rdb.FCall(ctx, c.lib.Name+"_"+fn, []string{route}, full...)
	if missingFunction(cmd.Err()) {
		if err := c.Load(ctx); err != nil {
			return cmd
		}
		cmd = c.rdb.FCall(ctx, c.lib.Name+"_"+fn, []string{route}, full...)
	}
	return cmd
}

// Load puts the library on every master (FUNCTION LOAD is per node); REPLACE makes a repeat
// harmless.
func (c *Caller) Load(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	loadOne := func(ctx context.Context, r *redis.Client) error {
		return r.FunctionLoadReplace(ctx, c.lib.Source).Err()
	}
	var err error
	switch r := c.rdb.(type) {
	case *redis.ClusterClient:
		err = r.ForEachMaster(ctx, loadOne)
	case *redis.Client:
		err = loadOne(ctx, r)
	default:
		err = c.rdb.FunctionLoadReplace(ctx, c.lib.Source).Err()
	}
	if err != nil {
		return fmt.Errorf("load the %s functions: %w", c.lib.Name, err)
	}
	return nil
}

func missingFunction(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Function not found")
}
