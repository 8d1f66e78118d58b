package queue

// Every Redis key the queue uses is named here (the Lua prelude builds the same names from the
// prefix). All of them carry the same hash tag, `{prefix}`, so on Redis Cluster they live in one
// slot and a single script may touch any of them — including keys of a job that the script
// itself picks, as claim and reap do.

type keys struct {
	prefix string // "{ht}:" — the tag and the separator
}

func newKeys(prefix string) keys { return keys{prefix: "{" + prefix + "}:"} }

func (k keys) job(id string) string      { return k.prefix + "job:" + id }
func (k keys) config(id string) string   { return k.prefix + "cfg:" + id }
func (k keys) progress(id string) string { return k.prefix + "prog:" + id }
func (k keys) events(id string) string   { return k.prefix + "ev:" + id }
func (k keys) org(org string) string     { return k.prefix + "org:" + org }
func (k keys) orgJobs(org string) string { return k.prefix + "org:" + org + ":jobs" }
func (k keys) fair() string              { return k.prefix + "fair" }
func (k keys) leases() string            { return k.prefix + "leases" }
func (k keys) delayed() string           { return k.prefix + "delayed" }
func (k keys) outbox() string            { return k.prefix + "outbox" }
func (k keys) meta() string              { return k.prefix + "meta" }

// ended indexes the jobs that ended by when they did, for the archiver.
func (k keys) ended() string { return k.prefix + "ended" }

// revoked marks a revoked token by its id (jti) until the token expires.
func (k keys) revoked(jti string) string { return k.prefix + "revoked:" + jti }

func (k keys) classQueue(org, class string) string { return k.prefix + "q:" + org + ":" + class }

// wake is the pub/sub channel a submit or requeue publishes on, so that claims waiting in
// any API process try again at once.
func (k keys) wake() string { return k.prefix + "wake" }
