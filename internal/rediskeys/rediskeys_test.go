package rediskeys_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/rediskeys"
	"github.com/hostedtrain/hostedtrain/internal/redistest"
)

// The Lua a library is given builds every key exactly as Go names it: run in a real
// redis-server, each builder and each fixed name is compared with Go's.
func TestLuaNamesKeysAsGoDoes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	for name, set := range map[string]rediskeys.Set{"queue": rediskeys.Queue, "webhooks": rediskeys.Webhooks} {
		const prefix = "{t}:x:"
		var script strings.Builder
		script.WriteString(set.Lua("P"))
		script.WriteString("setKeys(ARGV[1])\nlocal out = {}\n")
		var want []string
		for _, f := range set.Fixed {
			fmt.Fprintf(&script, "out[#out + 1] = %s\n", f.Lua)
			want = append(want, set.FixedName(prefix, f.Lua))
		}
		for _, n := range set.Named {
			args := []string{"a1", "b2"}[:max(n.Args, 1)]
			fmt.Fprintf(&script, "out[#out + 1] = %s('%s')\n", n.Lua, strings.Join(args, "', '"))
			want = append(want, set.NamedKey(prefix, n.Lua, args...))
		}
		script.WriteString("return out\n")
		got, err := rdb.Eval(context.Background(), script.String(), nil, prefix).StringSlice()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: Lua names\n%v\nGo names\n%v", name, got, want)
		}
	}
}

// A job's own keys are named alike in Lua and Go, and carry the job's own hash tag.
func TestLuaNamesOwnKeysAsGoDoes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	var script strings.Builder
	script.WriteString("local P = ARGV[1]\n")
	script.WriteString(rediskeys.OwnLua("P"))
	script.WriteString("local out = {}\n")
	var want []string
	for _, o := range rediskeys.JobOwn {
		fmt.Fprintf(&script, "out[#out + 1] = %s('0192-id')\n", o.Lua)
		want = append(want, rediskeys.OwnKey("t7", "0192-id", o.Lua))
	}
	script.WriteString("return out\n")
	got, err := rdb.Eval(context.Background(), script.String(), nil, "{t7}:").StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Lua names\n%v\nGo names\n%v", got, want)
	}
	for _, k := range want {
		if !strings.HasPrefix(k, "{t7:0192-id}:") {
			t.Errorf("%s does not carry the job's own tag", k)
		}
	}
}

// No two kinds of one namespace can name the same key: no fixed name is another's, and no
// named kind's prefix starts another's unless their ends tell them apart.
func TestNoTwoKindsShareANamespace(t *testing.T) {
	t.Parallel()
	for name, set := range map[string]rediskeys.Set{"queue": rediskeys.Queue, "webhooks": rediskeys.Webhooks} {
		seen := map[string]string{}
		for _, f := range set.Fixed {
			if other, ok := seen[f.Name]; ok {
				t.Errorf("%s: %s and %s are both %q", name, f.Lua, other, f.Name)
			}
			seen[f.Name] = f.Lua
		}
		for _, n := range set.Named {
			key := n.Pre + "*" + n.Post
			if other, ok := seen[key]; ok {
				t.Errorf("%s: %s and %s are both %q", name, n.Lua, other, key)
			}
			seen[key] = n.Lua
		}
	}
}
