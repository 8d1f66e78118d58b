package queue

import "github.com/hostedtrain/hostedtrain/internal/rediskeys"

// Every Redis key the queue uses is named in internal/rediskeys (rediskeys.Queue), the one home
// of the service's keys; the Lua library's key names are generated from the same table. The
// queue's own keys carry one hash tag, `{prefix}`, so on Redis Cluster they live in one slot and
// a single function may touch any of them — including the live record of a job that the
// function itself picks, as claim and reap do. A job's own data (rediskeys.JobOwn) carries the
// job's own tag, `{prefix:<id>}`, so a cluster spreads jobs over its shards (see settle.go).

type keys struct {
	tag    string // "ht"
	prefix string // "{ht}:" — the tag and the separator
}

func newKeys(prefix string) keys { return keys{tag: prefix, prefix: "{" + prefix + "}:"} }

func (k keys) fixed(lua string) string { return rediskeys.Queue.FixedName(k.prefix, lua) }

func (k keys) of(lua string, names ...string) string {
	return rediskeys.Queue.NamedKey(k.prefix, lua, names...)
}

// own is job id's key lua under the job's own hash tag.
func (k keys) own(id, lua string) string { return rediskeys.OwnKey(k.tag, id, lua) }

func (k keys) job(id string) string        { return k.of("jobkey", id) }
func (k keys) oldConfig(id string) string  { return k.of("oldcfgkey", id) }
func (k keys) oldSecrets(id string) string { return k.of("oldseckey", id) }
func (k keys) progress(id string) string   { return k.of("progkey", id) }
func (k keys) events(id string) string     { return k.of("evkey", id) }
func (k keys) org(org string) string       { return k.of("orgkey", org) }
func (k keys) orgJobs(org string) string   { return k.of("orgjobs", org) }
func (k keys) orgIndex(org string) string  { return k.of("orgindex", org) }
func (k keys) orgUsage(org string) string  { return k.of("orgusage", org) }
func (k keys) orgStored(org string) string { return k.of("orgstored", org) }
func (k keys) orgExpiring(org string) string {
	return k.of("orgexpiring", org)
}
func (k keys) revoked(jti string) string { return k.of("revokedkey", jti) }
func (k keys) wake(proc string) string   { return k.of("wakechan", proc) }
func (k keys) leases() string            { return k.fixed("LEASES") }
func (k keys) outbox() string            { return k.fixed("OUTBOX") }
func (k keys) meta() string              { return k.fixed("META") }
func (k keys) ended() string             { return k.fixed("ENDED") }
func (k keys) settle() string            { return k.fixed("SETTLE") }
func (k keys) dropping() string          { return k.fixed("DROPPING") }
func (k keys) storedDue() string         { return k.fixed("STORED_DUE") }
func (k keys) classQueue(org, class string) string {
	return k.of("classq", org, class)
}
