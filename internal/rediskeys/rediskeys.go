// Package rediskeys is the one home of every Redis key the service uses: the queue's and the
// webhooks'. Each key is named here once, with what it holds; Go builds names from these tables
// and each Lua library's key names are generated from them (Lua), so Go and Lua cannot drift.
//
// Every key of one namespace shares its hash tag ("{ht}:" for the queue, "{ht}:wh:" for
// webhooks), so on Redis Cluster one function may touch any of them. A job's own data — its
// config and secrets always, its hash, events and progress once it has ended — carries the
// job's own tag instead, "{ht:<id>}:" (JobOwn), so a cluster spreads jobs over its shards.
package rediskeys

import (
	"fmt"
	"strings"
)

// Fixed is a key of which there is one: an index. Lua is the Lua global that holds its full
// name once a call has begun.
type Fixed struct{ Lua, Name, What string }

// Named is a key of one thing (a job, an organization, an endpoint…): the namespace's prefix,
// then Pre, the names joined by Sep, then Post. Lua is the Lua function that builds it, with as
// many arguments as Args.
type Named struct {
	Lua, Pre, Post, What string
	Args                 int    // how many names it takes (default 1)
	Sep                  string // between the names (default ":")
}

// Set is a namespace's keys.
type Set struct {
	Fixed []Fixed
	Named []Named
}

// FixedName returns the full name of the fixed key lua under prefix.
func (s Set) FixedName(prefix, lua string) string {
	for _, f := range s.Fixed {
		if f.Lua == lua {
			return prefix + f.Name
		}
	}
	panic("rediskeys: no fixed key " + lua)
}

// NamedKey returns the full name of the key kind lua of names under prefix.
func (s Set) NamedKey(prefix, lua string, names ...string) string {
	for _, n := range s.Named {
		if n.Lua == lua {
			if len(names) != max(n.Args, 1) {
				panic(fmt.Sprintf("rediskeys: %s takes %d names", lua, max(n.Args, 1)))
			}
			return prefix + n.Pre + strings.Join(names, n.sep()) + n.Post
		}
	}
	panic("rediskeys: no key kind " + lua)
}

func (n Named) sep() string {
	if n.Sep == "" {
		return ":"
	}
	return n.Sep
}

// Lua is the Lua that names the keys, for a library whose prefix is in the Lua variable pfx
// (an upvalue set per call): globals for the fixed keys, set by setKeys(prefix), and a
// builder function for each named kind.
func (s Set) Lua(pfx string) string {
	var b strings.Builder
	names := []string{pfx}
	for _, f := range s.Fixed {
		names = append(names, f.Lua)
	}
	b.WriteString("-- Generated from internal/rediskeys: the key names.\n")
	fmt.Fprintf(&b, "local %s\n", strings.Join(names, ", "))
	fmt.Fprintf(&b, "local function setKeys(p)\n  %s = p\n", pfx)
	for _, f := range s.Fixed {
		fmt.Fprintf(&b, "  %s = p .. '%s' -- %s\n", f.Lua, f.Name, f.What)
	}
	b.WriteString("end\n")
	for _, n := range s.Named {
		args := make([]string, max(n.Args, 1))
		for i := range args {
			args[i] = fmt.Sprintf("n%d", i+1)
		}
		body := strings.Join(args, " .. '"+n.sep()+"' .. ")
		post := ""
		if n.Post != "" {
			post = " .. '" + n.Post + "'"
		}
		fmt.Fprintf(&b, "-- %s\nlocal function %s(%s) return %s .. '%s' .. %s%s end\n",
			n.What, n.Lua, strings.Join(args, ", "), pfx, n.Pre, body, post)
	}
	return b.String()
}

// Own is a key of one job under the job's own hash tag: "{<tag>:<id>}:" then Name. Lua is the
// Lua function that builds it from the job's id.
type Own struct{ Lua, Name, What string }

// JobOwn are the keys a job keeps under its own hash tag, so that on Redis Cluster jobs spread
// over the shards while the queue's indices stay in one slot. A live job's hash, events and
// progress are in the queue's slot (Queue's jobkey, evkey, progkey), where the functions that
// schedule it see them; once it has ended they move here.
var JobOwn = []Own{
	{"ownjob", "job", "an ended job's hash of small fields"},
	{"owncfg", "cfg", "a job's normalized config (JSON), from its submit on"},
	{"ownsec", "sec", "a job's sealed secrets, from its submit on"},
	{"ownprog", "prog", "an ended job's newest progress report (JSON)"},
	{"ownev", "ev", "an ended job's events, a list: an event's position is its sequence number"},
	{"ownrestored", "restored", "the end (\"<finished_at>|<events>\") after which a restart put an ended job's inputs back (put_own leaves them)"},
}

// OwnTag is the hash tag of job id's own keys under the queue's tag (as "ht").
func OwnTag(tag, id string) string { return "{" + tag + ":" + id + "}:" }

// OwnKey returns the full name of job id's own key lua under the queue's tag.
func OwnKey(tag, id, lua string) string {
	for _, o := range JobOwn {
		if o.Lua == lua {
			return OwnTag(tag, id) + o.Name
		}
	}
	panic("rediskeys: no own key " + lua)
}

// OwnLua is the Lua that names a job's own keys, for a library whose queue prefix ("{tag}:")
// is in the Lua variable pfx: ownslot(id) and a builder per key.
func OwnLua(pfx string) string {
	var b strings.Builder
	b.WriteString("-- Generated from internal/rediskeys: a job's own keys, under its own hash tag.\n")
	fmt.Fprintf(&b, "local function ownslot(id) return '{' .. string.sub(%s, 2, -3) .. ':' .. id .. '}:' end\n", pfx)
	for _, o := range JobOwn {
		fmt.Fprintf(&b, "-- %s\nlocal function %s(id) return ownslot(id) .. '%s' end\n", o.What, o.Lua, o.Name)
	}
	return b.String()
}

// Queue is the queue's namespace, under "{prefix}:".
var Queue = Set{
	Fixed: []Fixed{
		{"OUTBOX", "outbox", "the webhook outbox: a stream of the events of organizations with an endpoint"},
		{"LEASES", "leases", "live jobs by when their lease must be looked at (see heartbeat.lua)"},
		{"DELAYED", "delayed", "queued jobs waiting out a retry backoff, by ready time"},
		{"STOPPING", "stopping", "live jobs told to stop, by the end of their grace"},
		{"DEADLINES", "deadlines", "running jobs by the end of their time limit"},
		{"AGENTS", "agents", "agent -> the GPUs it last said it had free while waiting"},
		{"AGENTS_SEEN", "agents:seen", "agents by when they last waited for work (the reaper trims old ones)"},
		{"NODES_CACHED", "nodes:cached", "agents by when they last reported their node cache (nodecache:<agent>; the reaper's cache metrics read them)"},
		{"NODES_FAULTED", "nodes:faulted", "agents by when they last had a platform fault (node health lists them)"},
		{"TTL_ORGS", "orgs:ttl", "organizations with a checkpoint TTL (the reaper expires their ended jobs' checkpoints)"},
		{"BUDGET_HELD", "orgs:budget_held", "organizations held for a spent monthly budget, by when their month ends (the reaper files them back)"},
		{"NODES", "nodes", "agent -> \"<state>|<since ms>|<reason>\" for nodes out of rotation: cordoned, quarantined or draining"},
		{"META", "meta", "the usage reference time (tref), and whether jobs from before the storage meter were filed for it (stored_filed)"},
		{"STORED_DUE", "stored:due", "jobs whose stored bytes are due to be measured, by when: \"<id>\" a live job's next measure or an ended job's first, \"~<id>\" an ended job's last (storage.go)"},
		{"ENDED", "ended", "jobs in a terminal state by when they ended: the archiver's input"},
		{"DELETE_ON_END", "delete_on_end", "jobs to delete once they have stopped (a delete of a live job that asked to stop it first): the reaper deletes each once it ends"},
		{"ORGS", "orgs", "every organization"},
		{"CLASSES", "classes", "every GPU class a job was ever queued in"},
		{"READY", "ready", "GPU class -> how many jobs are ready (queued, not backing off) in it"},
		{"WAITING", "waiting", "waiting claims by when they stop waiting (the reaper trims lapsed ones)"},
		{"WAIT_ANY", "waiters:-", "waiting claims that take a job needing no GPU"},
		{"AGENT_HELD", "agents:held", "agent -> \"<ms> <models>\": when it last filed what its node holds in holders:<need>, and those \"m:<model>\" cache needs"},
		{"WAITER_HELD", "waitheld", "waiting claim -> the models its node holds (\"m:<model>\" cache needs) it is filed under in waitheld:<GPU model>:<need>"},
		{"SETTLE", "settle", "ended jobs whose hash, events and progress are still to move to their own slot, by when they ended (Redis Cluster only)"},
		{"DROPPING", "dropping", "archived jobs whose own keys are still to delete, by when they were archived"},
		{"REVOKED", "revocations", "revoked token ids by when their revocation ends"},
		{"REVOKED_LOG", "revocations:log", "\"<jti> <end ms>\" by when it was revoked, for ten minutes (see revoke.go)"},
		{"ADAPTERS_LIVE", "adapters:live", "adapters deploying, deployed or unloading, by when a request last reached them (the reaper's deployments duty)"},
		{"SERVERS", "servers", "live serve jobs (deployments' model servers), by when they were made"},
	},
	Named: []Named{
		{Lua: "jobkey", Pre: "job:", What: "a live job's hash of small fields (see JobOwn for one that ended)"},
		{Lua: "progkey", Pre: "prog:", What: "a live job's newest progress report (JSON)"},
		{Lua: "evkey", Pre: "ev:", What: "a live job's events, a list: an event's position is its sequence number"},
		{Lua: "oldcfgkey", Pre: "cfg:", What: "a job's config as stores before issue 15 kept it (the reaper moves it to the job's own slot)"},
		{Lua: "oldseckey", Pre: "sec:", What: "a job's sealed secrets as stores before issue 15 kept them (moved likewise)"},
		{Lua: "orgkey", Pre: "org:", What: "an organization's hash: counters, usage, weight, limits, ready classes"},
		{Lua: "orgjobs", Pre: "org:", Post: ":jobs", What: "an organization's job ids (a lex-ordered set: UUIDv7 ids sort by creation)"},
		{Lua: "orgexpiring", Pre: "org:", Post: ":expiring", What: "an organization with a checkpoint TTL: its ended jobs by when they ended, whose checkpoints the reaper deletes once the TTL has passed"},
		{Lua: "orgusage", Pre: "org:", Post: ":usage", What: "an organization's GPU time by who used it: u:<user> and t:<token id> in GPU-ms, uc:/tc: their cost in micro-dollars"},
		{Lua: "orgstored", Pre: "org:", Post: ":stored", What: "an organization's bytes in object storage by job, as the storage meter last measured them (storage.go); the total is the org hash's `stored`"},
		{Lua: "orgjudge", Pre: "org:", Post: ":judge", What: "an organization's tokens of the service's judge (api's /v1/judge): in and out in all, j:<job>:in and j:<job>:out by job"},
		{Lua: "orgstreams", Pre: "org:", Post: ":streams", What: "an organization's open event and log streams by when each must be renewed (the API's cap per organization)"},
		{Lua: "orgindex", Pre: "org:", Post: ":by", What: "an organization's job ids scored by kind, status and creation time (List's filters)"},
		{Lua: "classq", Pre: "q:", Args: 2, What: "an organization's queue of ready jobs in a GPU class, by rank"},
		{Lua: "fairkey", Pre: "fair:", What: "the organizations with ready jobs in a GPU class and room to run one, by usage / weight"},
		{Lua: "waitkey", Pre: "waiters:", What: "waiting claims by how many GPUs of a model they have free"},
		{Lua: "waitheld", Pre: "waitheld:", Args: 2, What: "waiting claims whose node holds a model's weights (GPU model, \"m:<model>\"), by how many GPUs of that GPU model they have free"},
		{Lua: "holders", Pre: "holders:", What: "agents whose node holds a model's weights (\"m:<model>\"), by when they last said so with a claim"},
		{Lua: "agentfree", Pre: "agents:free:", What: "agents by how many GPUs of a model they had free when they last waited"},
		{Lua: "nodefaults", Pre: "nodefaults:", What: "an agent's recent platform faults (\"<job>@<ms>\") by when (node health)"},
		{Lua: "nodecache", Pre: "nodecache:", What: "what an agent last reported of its node cache (JSON, by kind), for an hour"},
		{Lua: "turn", Pre: "turn:", What: "a reaper duty that runs once a period across processes: set for the period by the run that took it"},
		{Lua: "nodewarm", Pre: "nodewarm:", What: "models an operator asked a node to fetch into its cache, until its agent takes them"},
		{Lua: "claimkey", Pre: "claim:", What: "a claim an agent names: \"<job> <token> <agent>\" once made, \"-\" once abandoned"},
		{Lua: "revokedkey", Pre: "revoked:", What: "a revoked token's id (jti), until the token expires"},
		{Lua: "deletingkey", Pre: "deleting:", What: "a job whose delete has begun (its data in storage is going): restart refuses it; gone with the job"},
		{Lua: "idemkey", Pre: "idem:", What: "an idempotency key (counted org name, then the key): \"<fingerprint> <job>\""},
		{Lua: "wakechan", Pre: "wake:", What: "the pub/sub channel of one API process's waiting claims"},
		{Lua: "adapterkey", Pre: "adapter:", What: "an adapter's hash: one committed checkpoint's weights and their deployment (queue/record.go's adapterFields)"},
		{Lua: "orgadapters", Pre: "org:", Post: ":adapters", What: "an organization's adapters by when they were filed"},
		{Lua: "adapterof", Pre: "adapterof:", Args: 2, What: "the adapter of a job's checkpoint step (job, step)"},
		{Lua: "orgservers", Pre: "org:", Post: ":servers", What: "an organization's model servers: base model (full:<adapter> for a full fine-tune) -> its serve job"},
		{Lua: "servingkey", Pre: "serving:", What: "the adapters a serve job is to hold"},
		{Lua: "unloadingkey", Pre: "unloading:", What: "the adapters a serve job is to drop, until its agent says they are gone"},
		{Lua: "tunnelkey", Pre: "tunnel:", What: "the inference gateway an agent's tunnel is open to (its internal URL), while it is (gateway/routes.go)"},
		{Lua: "adapterlat", Pre: "adapterlat:", What: "an adapter's newest request latencies (ms, newest first, at most 1,000): its p50 and p99"},
	},
}

// Webhooks is the webhook service's namespace, under "{prefix}:wh:".
var Webhooks = Set{
	Fixed: []Fixed{
		{"DUEORGS", "dueorgs", "organizations with deliveries to attempt, by when"},
		{"LEGACY_DUE", "due", "deliveries to attempt by when, as versions before per-organization queues kept them"},
	},
	Named: []Named{
		{Lua: "epkey", Pre: "ep:", What: "an endpoint's hash (org, url, events, enabled, sealed secrets, ...)"},
		{Lua: "orgeps", Pre: "org:", What: "an organization's endpoint ids"},
		{Lua: "evkey", Pre: "ev:", What: "an event, once for all its deliveries, with how many refer to it and how many are pending"},
		{Lua: "dlkey", Pre: "dl:", What: "a delivery's hash (endpoint, message, type, job, sequence, status, last attempt); never a body"},
		{Lua: "attkey", Pre: "att:", What: "a delivery's last attempts, newest first"},
		{Lua: "logkey", Pre: "log:", What: "an endpoint's deliveries by creation time"},
		{Lua: "dueset", Pre: "due:", What: "an organization's deliveries to attempt, by when"},
		{Lua: "busyset", Pre: "busy:", What: "an organization's deliveries being sent, by lease end"},
		{Lua: "orderkey", Pre: "order:", Args: 2, What: "an endpoint's pending deliveries of one job, in sequence order (only the head is due)"},
		{Lua: "eprate", Pre: "rate:test:ep:", What: "an endpoint's test deliveries this window"},
		{Lua: "orgrate", Pre: "rate:test:org:", What: "an organization's test deliveries this window"},
	},
}
