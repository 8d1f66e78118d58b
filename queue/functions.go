package queue

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/redisfn"
	"github.com/hostedtrain/hostedtrain/internal/rediskeys"
)

// The queue's operations are one Redis Functions library (internal/redisfn): the prelude's
// helpers are built once when the library loads. Each file of lua/ after the prelude becomes
// one function.

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
	//go:embed lua/adapter_put.lua
	adapterPutLua string
	//go:embed lua/deploy.lua
	deployLua string
	//go:embed lua/unload.lua
	unloadLua string
	//go:embed lua/serving.lua
	servingLua string
	//go:embed lua/adapter_check.lua
	adapterCheckLua string
	//go:embed lua/server_check.lua
	serverCheckLua string
	//go:embed lua/adapter_forget.lua
	adapterForgetLua string
)

// library is the queue's functions, built once.
var library = mustBuildLibrary(jobField)

// buildLibrary builds the queue's library with the job record's field names r: every F.<name>
// of its Lua becomes the field's name in the hash, and a name r does not have fails the build.
func buildLibrary(r jobFields) (redisfn.Library, error) {
	header, err := r.expandFields(rediskeys.Queue.Lua("PFX") + rediskeys.OwnLua("PFX") + luaIndexCodes() + r.luaFieldIDs() +
		r.luaClaimed() + luaStored() + luaBytes() + prelude)
	if err != nil {
		return redisfn.Library{}, err
	}
	bodies := map[string]string{
		"submit": submitLua, "claim": claimLua, "heartbeat": heartbeatLua, "finish": finishLua,
		"release": releaseLua, "cancel": cancelLua, "restart": restartLua, "reap": reapLua,
		"position": positionLua, "set_org": setOrgLua, "abandon": abandonLua, "archive": archiveLua,
		"unwait": unwaitLua, "settle": settleLua, "put_own": putOwnLua, "stored": storedLua,
		"delete_begin": deleteBeginLua, "stream": streamLua, "set_budget": setBudgetLua,
		"adapter_put": adapterPutLua, "deploy": deployLua, "unload": unloadLua, "serving": servingLua,
		"adapter_check": adapterCheckLua, "server_check": serverCheckLua, "adapter_forget": adapterForgetLua,
	}
	for name, body := range bodies {
		if bodies[name], err = r.expandFields(body); err != nil {
			return redisfn.Library{}, fmt.Errorf("%w (in %s.lua)", err, name)
		}
	}
	return redisfn.Build(redisfn.Spec{
		Prefix: "hostedtrain",
		Header: header,
		Common: commonArgs,
		Args:   funcArgs,
		Bodies: bodies,
		// The body runs as a function of its own, so that whatever it returns, the jobs it ended
		// are settled after it (settle_all, prelude.lua); made once, at load: a closure made per
		// call costs every call.
		Register: func(name, argsLua, body string) string {
			return fmt.Sprintf("\ndo\nlocal function body(keys, args)\nbegin(keys, args)\n%s%s\nend\nredis.register_function('%s', function(keys, args)\nlocal reply = body(keys, args)\nsettle_all()\nreturn reply\nend)\nend\n", argsLua, body, name)
		},
	})
}

func mustBuildLibrary(r jobFields) redisfn.Library {
	l, err := buildLibrary(r)
	if err != nil {
		panic(err)
	}
	return l
}

// call runs one of the library's functions with its arguments by name (see args.go), after
// the ones every function takes first, loading the library once if the server lacks it (a new
// server, a new cluster node, a restart without persistence). rest are a variadic function's
// further values.
func (c *store) call(ctx context.Context, fn, route string, a args, rest ...any) *redis.Cmd {
	return c.callAt(ctx, c.cfg.Now(), fn, route, a, rest...)
}

// callAt is call with the time the function takes for now, for callers that derive other
// times (a lease's expiry) from the same instant.
func (c *store) callAt(ctx context.Context, now time.Time, fn, route string, a args, rest ...any) *redis.Cmd {
	return c.funcs.Call(ctx, fn, route, []any{c.keys.prefix, ms(now), c.tau, c.cfg.MaxRunning, c.cfg.MaxQueued, c.splitArg(),
		max(0, c.cfg.MaxOrgBytes), boolArg(c.cfg.Store != nil)}, a, rest...)
}

// luaClaimed is the claimed fields for claim.lua: CLAIMED, their names in the hash in order, and
// CLAIMED_AT, each one's place by its Lua name.
func (r jobFields) luaClaimed() string {
	var names, at strings.Builder
	for i, n := range r.claimed() {
		fmt.Fprintf(&names, "'%s', ", n)
		fmt.Fprintf(&at, "[FIELD_ID['%s']] = %d, ", n, i+1)
	}
	return "-- Generated from queue/record.go's claimed fields.\nlocal CLAIMED = {" + names.String() + "}\nlocal CLAIMED_AT = {" + at.String() + "}\n"
}
