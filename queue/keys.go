package queue

import "github.com/hostedtrain/hostedtrain/internal/rediskeys"

// Every Redis key the queue uses is named in internal/rediskeys (rediskeys.Queue), the one home
// of the service's keys; the Lua library's key names are generated from the same table. All of
// them carry the same hash tag, `{prefix}`, so on Redis Cluster they live in one slot and a
// single function may touch any of them — including keys of a job that the function itself
// picks, as claim and reap do.

type keys struct {
	prefix string // "{ht}:" — the tag and the separator
}

func newKeys(prefix string) keys { return keys{prefix: "{" + prefix + "}:"} }

func (k keys) fixed(lua string) string { return rediskeys.Queue.FixedName(k.prefix, lua) }

func (k keys) of(lua string, names ...string) string {
	return rediskeys.Queue.NamedKey(k.prefix, lua, names...)
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
	return k.of("classq", org, class)
}
