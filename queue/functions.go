package queue

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/rediskeys"
)

// The queue's operations are one Redis Functions library (Redis 7): the prelude's helpers are
// built once when the library loads, not on every call as with EVAL, which is most of what a
// small script costs. Each file of lua/ after the prelude becomes one function.
//
// The library's name carries a hash of its source, so two versions of the service running side
// by side (a rolling deploy) call their own functions and never replace each other's.

var (
	//go:embed lua/prelude.lua
	prelude string
	//go:embed lua/submit.lua
	submitLua string
	//go:embed lua/claim.lua
	claimLua string
	//go:embed lua/heartbeat.lua
	heartbeatLua string
	//go:embed lua/finish.lua
	finishLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/cancel.lua
	cancelLua string
	//go:embed lua/restart.lua
	restartLua string
	//go:embed lua/reap.lua
	reapLua string
	//go:embed lua/position.lua
	positionLua string
	//go:embed lua/abandon.lua
	abandonLua string
	//go:embed lua/set_org.lua
	setOrgLua string
	//go:embed lua/archive.lua
	archiveLua string
	//go:embed lua/unwait.lua
	unwaitLua string
	//go:embed lua/settle.lua
	settleLua string
	//go:embed lua/put_own.lua
	putOwnLua string
	//go:embed lua/stored.lua
	storedLua string
	//go:embed lua/delete_begin.lua
	deleteBeginLua string
	//go:embed lua/stream.lua
	streamLua string
	//go:embed lua/set_budget.lua
	setBudgetLua string
)

// library is the source to load and the name its functions carry.
var library = buildLibrary(map[string]string{
	"submit": submitLua, "claim": claimLua, "heartbeat": heartbeatLua, "finish": finishLua,
	"release": releaseLua, "cancel": cancelLua, "restart": restartLua, "reap": reapLua,
	"position": positionLua, "set_org": setOrgLua, "abandon": abandonLua, "archive": archiveLua,
	"unwait": unwaitLua, "settle": settleLua, "put_own": putOwnLua, "stored": storedLua,
	"delete_begin": deleteBeginLua, "stream": streamLua, "set_budget": setBudgetLua,
})

type lib struct {
	name   string
	source string
}

func buildLibrary(funcs map[string]string) lib {
	var body strings.Builder
	body.WriteString(rediskeys.Queue.Lua("PFX"))
	body.WriteString(rediskeys.OwnLua("PFX"))
	body.WriteString(luaIndexCodes())
	body.WriteString(luaClaimed())
	body.WriteString(luaStored())
	body.WriteString(luaBytes())
	body.WriteString(prelude)
	// A stable order, so the hash (and the name) depends on the code alone.
	names := slices.Sorted(maps.Keys(funcs))
	if err := checkArgs(names); err != nil {
		panic(err)
	}
	for _, n := range names {
		// The body runs as a function of its own, so that whatever it returns, the jobs it
		// ended are settled after it (settle_all, prelude.lua).
		// (made once, at load: a closure made per call costs every call).
		fmt.Fprintf(&body, "\ndo\nlocal function body(keys, args)\nbegin(keys, args)\n%s%s\nend\nredis.register_function('@_%s', function(keys, args)\nlocal reply = body(keys, args)\nsettle_all()\nreturn reply\nend)\nend\n", luaArgs(n), funcs[n], n)
	}
	sum := sha1.Sum([]byte(body.String()))
	name := "hostedtrain_" + hex.EncodeToString(sum[:6])
	src := "#!lua name=" + name + "\n" + strings.ReplaceAll(body.String(), "'@_", "'"+name+"_")
	return lib{name: name, source: src}
}

// functions loads the library where it is missing.
type functions struct {
	rdb redis.UniversalClient
	mu  sync.Mutex
}

// load puts the library on every master (FUNCTION LOAD is per node); REPLACE makes a repeat
// harmless.
func (f *functions) load(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	loadOne := func(ctx context.Context, c *redis.Client) error {
		return c.FunctionLoadReplace(ctx, library.source).Err()
	}
	var err error
	switch c := f.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, loadOne)
	case *redis.Client:
		err = loadOne(ctx, c)
	default:
		err = f.rdb.FunctionLoadReplace(ctx, library.source).Err()
	}
	if err != nil {
		return fmt.Errorf("queue: load functions: %w", err)
	}
	return nil
}

func missingFunction(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Function not found")
}

// call runs one of the library's functions with its arguments by name (see args.go), after
// the ones every function takes first, loading the library once if the server lacks it (a new
// server, a new cluster node, a restart without persistence). rest are a variadic function's
// further values.
func (c *Client) call(ctx context.Context, fn, route string, a args, rest ...any) *redis.Cmd {
	return c.callAt(ctx, c.cfg.Now(), fn, route, a, rest...)
}

// callAt is call with the time the function takes for now, for callers that derive other
// times (a lease's expiry) from the same instant.
func (c *Client) callAt(ctx context.Context, now time.Time, fn, route string, a args, rest ...any) *redis.Cmd {
	full, err := argv(fn, []any{c.keys.prefix, ms(now), c.tau, c.cfg.MaxRunning, c.cfg.MaxQueued, c.splitArg(),
		max(0, c.cfg.MaxOrgBytes), boolArg(c.cfg.Store != nil)}, a, rest)
	if err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	cmd := c.rdb.FCall(ctx, library.name+"_"+fn, []string{route}, full...)
	if missingFunction(cmd.Err()) {
		if err := c.funcs.load(ctx); err != nil {
			return cmd
		}
		cmd = c.rdb.FCall(ctx, library.name+"_"+fn, []string{route}, full...)
	}
	return cmd
}

// luaClaimed is claimedFields for claim.lua: CLAIMED, the names in order, and CLAIMED_AT, each
// name's place.
func luaClaimed() string {
	var names, at strings.Builder
	for i, n := range claimedFields {
		fmt.Fprintf(&names, "'%s', ", n)
		fmt.Fprintf(&at, "%s = %d, ", n, i+1)
	}
	return "-- Generated from queue.go's claimedFields.\nlocal CLAIMED = {" + names.String() + "}\nlocal CLAIMED_AT = {" + at.String() + "}\n"
}
