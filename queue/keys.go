package queue

import (
	"fmt"
	"strings"
)

// The queue's Redis contract has one home: every key it uses is named in the tables below, and
// the Lua library's key names are generated from the same tables (luaKeys), so Go and Lua
// cannot drift apart. All of them carry the same hash tag, `{prefix}`, so on Redis Cluster they
// live in one slot and a single function may touch any of them — including keys of a job that
// the function itself picks, as claim and reap do.

// fixedKeys are the queue's indices: one key each. lua is the Lua global that holds the full
// name once a call has begun.
var fixedKeys = []struct{ lua, name, what string }{
	{"OUTBOX", "outbox", "the webhook outbox: a stream of the events of organizations with an endpoint"},
	{"LEASES", "leases", "live jobs by when their lease must be looked at (see heartbeat.lua)"},
	{"DELAYED", "delayed", "queued jobs waiting out a retry backoff, by ready time"},
	{"STOPPING", "stopping", "live jobs told to stop, by the end of their grace"},
	{"DEADLINES", "deadlines", "running jobs by the end of their time limit"},
	{"AGENTS", "agents", "agent -> the GPUs it last said it had free while waiting"},
	{"AGENTS_SEEN", "agents:seen", "agents by when they last waited for work (the reaper trims old ones)"},
	{"META", "meta", "the usage reference time (tref)"},
	{"ENDED", "ended", "jobs in a terminal state by when they ended: the archiver's input"},
	{"ORGS", "orgs", "every organization"},
	{"CLASSES", "classes", "every GPU class a job was ever queued in"},
	{"READY", "ready", "GPU class -> how many jobs are ready (queued, not backing off) in it"},
	{"WAITING", "waiting", "waiting claims by when they stop waiting (the reaper trims lapsed ones)"},
	{"WAIT_ANY", "waiters:-", "waiting claims that take a job needing no GPU"},
	{"REVOKED", "revocations", "revoked token ids by when their revocation ends"},
	{"REVOKED_LOG", "revocations:log", "\"<jti> <end ms>\" by when it was revoked, for ten minutes (see revoke.go)"},
}

// idKeys are keys of one thing (a job, an organization, a GPU class…): the prefix, then pre,
// the thing's name and post. lua is the Lua function that builds it.
var idKeys = []struct{ lua, pre, post, what string }{
	{"jobkey", "job:", "", "a job's hash of small fields"},
	{"cfgkey", "cfg:", "", "a job's normalized config (JSON)"},
	{"seckey", "sec:", "", "a job's sealed secrets"},
	{"progkey", "prog:", "", "a job's newest progress report (JSON)"},
	{"evkey", "ev:", "", "a job's events, a list: an event's position is its sequence number"},
	{"orgkey", "org:", "", "an organization's hash: counters, usage, weight, limits, ready classes"},
	{"orgjobs", "org:", ":jobs", "an organization's job ids (a lex-ordered set: UUIDv7 ids sort by creation)"},
	{"orgindex", "org:", ":by", "an organization's job ids scored by kind, status and creation time (List's filters)"},
	{"fairkey", "fair:", "", "the organizations with ready jobs in a GPU class and room to run one, by usage / weight"},
	{"waitkey", "waiters:", "", "waiting claims by how many GPUs of a model they have free"},
	{"agentfree", "agents:free:", "", "agents by how many GPUs of a model they had free when they last waited"},
	{"claimkey", "claim:", "", "a claim an agent names: \"<job> <token> <agent>\" once made, \"-\" once abandoned"},
	{"revokedkey", "revoked:", "", "a revoked token's id (jti), until the token expires"},
	{"idemkey", "idem:", "", "an idempotency key (counted org name, then the key): \"<fingerprint> <job>\""},
	{"wakechan", "wake:", "", "the pub/sub channel of one API process's waiting claims"},
}

// classQueue is the one key of two names: an organization's queue of ready jobs in a GPU
// class, by rank.
const classQueuePre, classQueueMid = "q:", ":"

type keys struct {
	prefix string // "{ht}:" — the tag and the separator
}

func newKeys(prefix string) keys { return keys{prefix: "{" + prefix + "}:"} }

func (k keys) fixed(lua string) string {
	for _, f := range fixedKeys {
		if f.lua == lua {
			return k.prefix + f.name
		}
	}
	panic("queue: no fixed key " + lua)
}

func (k keys) of(lua, name string) string {
	for _, f := range idKeys {
		if f.lua == lua {
			return k.prefix + f.pre + name + f.post
		}
	}
	panic("queue: no key kind " + lua)
}

func (k keys) job(id string) string       { return k.of("jobkey", id) }
func (k keys) config(id string) string    { return k.of("cfgkey", id) }
func (k keys) progress(id string) string  { return k.of("progkey", id) }
func (k keys) events(id string) string    { return k.of("evkey", id) }
func (k keys) org(org string) string      { return k.of("orgkey", org) }
func (k keys) orgJobs(org string) string  { return k.of("orgjobs", org) }
func (k keys) orgIndex(org string) string { return k.of("orgindex", org) }
func (k keys) revoked(jti string) string  { return k.of("revokedkey", jti) }
func (k keys) wake(proc string) string    { return k.of("wakechan", proc) }
func (k keys) leases() string             { return k.fixed("LEASES") }
func (k keys) outbox() string             { return k.fixed("OUTBOX") }
func (k keys) meta() string               { return k.fixed("META") }
func (k keys) ended() string              { return k.fixed("ENDED") }
func (k keys) classQueue(org, class string) string {
	return k.prefix + classQueuePre + org + classQueueMid + class
}

// luaKeys is the Lua that names the keys: globals for the fixed ones, set whenever a call
// brings a prefix other than the last call's (setKeys), and a builder function for each kind.
func luaKeys() string {
	var b strings.Builder
	names := make([]string, len(fixedKeys))
	for i, f := range fixedKeys {
		names[i] = f.lua
	}
	fmt.Fprintf(&b, "-- Generated from queue/keys.go: the key names.\nlocal PFX, %s\n", strings.Join(names, ", "))
	b.WriteString("local function setKeys(pfx)\n  PFX = pfx\n")
	for _, f := range fixedKeys {
		fmt.Fprintf(&b, "  %s = pfx .. '%s' -- %s\n", f.lua, f.name, f.what)
	}
	b.WriteString("end\n")
	for _, f := range idKeys {
		post := ""
		if f.post != "" {
			post = " .. '" + f.post + "'"
		}
		fmt.Fprintf(&b, "-- %s\nlocal function %s(name) return PFX .. '%s' .. name%s end\n", f.what, f.lua, f.pre, post)
	}
	fmt.Fprintf(&b, "-- an organization's queue of ready jobs in a GPU class, by rank\n"+
		"local function classq(org, class) return PFX .. '%s' .. org .. '%s' .. class end\n", classQueuePre, classQueueMid)
	return b.String()
}
