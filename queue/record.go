package queue

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
)

// The job record: a job is a Redis hash of small fields (kept small so Redis stores it as a
// listpack) beside three strings for its large values (config, sealed secrets, progress; keys.go
// names them). This table is the one home of the hash's field names, as internal/rediskeys is of
// the key names:
//
//   - Go reads and writes the hash through jobField (jobField.Status, jobField.StopRequested, ...), so a
//     misspelt field does not compile;
//   - the Lua library writes a field as F.<name> (F.status, F.stop_requested), which the build
//     of the library (expandFields) replaces by the field's name in the hash; a name that is not
//     in this table fails the build, so the library never loads with it. Lua writes no field
//     name as a string literal (TestTheJobRecordIsNamedOnce renames every field and runs a
//     job's whole life through the library).
//
// A Lua table of fields read by name (jobfields, prelude.lua) is keyed by the field's Lua name,
// FIELD_ID maps a stored name back to it.
type jobFields struct {
	ID               string `lua:"id" what:"the job's id"`
	Org              string `lua:"org" what:"the organization that owns it"`
	Kind             string `lua:"kind" what:"rl, fft, eval, gepa"`
	Name             string `lua:"name" what:"the user's name for it"`
	Status           string `lua:"status" what:"QUEUED, PENDING, RUNNING, COMPLETED, FAILED, STOPPED"`
	Attempt          string `lua:"attempt" what:"the attempt it is on (absent: 1)"`
	Fence            string `lua:"fence" what:"the run: claims so far; a lease token starts with it"`
	MaxAttempts      string `lua:"max_attempts" what:"attempts it may take"`
	Error            string `lua:"error" what:"why it failed"`
	Failure          string `lua:"failure" what:"its failure analysis, JSON (job.FailureAnalysis)"`
	StopRequested    string `lua:"stop_requested" what:"1: it was told to stop"`
	StopReason       string `lua:"stop_reason" what:"user, time_limit, budget, restart"`
	StopDeadline     string `lua:"stop_deadline" what:"when the service ends it if its agent has not (ms)"`
	RestartRequested string `lua:"restart_requested" what:"1: it is to be queued again once it stops"`
	RestartLimit     string `lua:"restart_limit" what:"the queued limit the restart request found"`
	ResumeStep       string `lua:"resume_step" what:"the checkpoint step its next run resumes from"`
	CheckpointStep   string `lua:"checkpoint_step" what:"its newest committed checkpoint step"`
	StepBacklog      string `lua:"step_backlog" what:"committed steps still owed a job.checkpoint event"`
	MaxSteps         string `lua:"max_steps" what:"the steps it may report"`
	CreatedAt        string `lua:"created_at" what:"when it was submitted (ms)"`
	UpdatedAt        string `lua:"updated_at" what:"when it last changed (ms; absent: created_at)"`
	StartedAt        string `lua:"started_at" what:"when it first ran (ms)"`
	FinishedAt       string `lua:"finished_at" what:"when it ended (ms)"`
	ReadyAt          string `lua:"ready_at" what:"when its retry backoff ends (ms)"`
	Priority         string `lua:"priority" what:"its priority, -100..100"`
	Class            string `lua:"class" what:"its GPU class, MODEL:COUNT"`
	GPUs             string `lua:"gpus" what:"GPUs it holds while it runs"`
	Rank             string `lua:"rank" what:"its place in its class queue"`
	Avoid            string `lua:"avoid" what:"agent|until: the agent a retry keeps it from"`
	TimeLimitMs      string `lua:"time_limit_ms" what:"the run time it may take (ms)"`
	BudgetMs         string `lua:"budget_ms" what:"the GPU time it may use (GPU-ms)"`
	BudgetSeen       string `lua:"budget_seen" what:"the highest budget mark announced (50, 80, 100)"`
	EstimateMs       string `lua:"est_ms" what:"the GPU time it is expected to take (GPU-ms)"`
	Price            string `lua:"price" what:"$ per GPU-hour × 1e6, for usage's cost"`
	By               string `lua:"by" what:"the user who submitted it"`
	Token            string `lua:"token" what:"the API token it was submitted with"`
	LeaseToken       string `lua:"lease_token" what:"the current run's lease token"`
	LeaseExpires     string `lua:"lease_expires" what:"when the lease lapses (ms)"`
	LeaseFiled       string `lua:"lease_filed" what:"the expiry the leases index holds for it (ms)"`
	AgentID          string `lua:"agent_id" what:"the agent that holds or last held it"`
	ChargedUntil     string `lua:"charged_until" what:"how far its GPU time is charged to its org (ms)"`
	HeldSince        string `lua:"held_since" what:"since when it holds its GPUs (ms)"`
	GPUMs            string `lua:"gpu_ms" what:"GPU time used by its runs that ended (GPU-ms)"`
	LogBytes         string `lua:"log_bytes" what:"log bytes its current run wrote"`
	Pipeline         string `lua:"pipeline" what:"the pipeline its agent runs"`
	Emulated         string `lua:"emulated" what:"1: the pipeline is the emulator"`
	Upstream         string `lua:"upstream" what:"upstream versions it ran with, JSON"`
	CfgBytes         string `lua:"cfg_bytes" what:"its config's size"`
	SecBytes         string `lua:"sec_bytes" what:"its sealed secrets' size"`
	Shed             string `lua:"shed" what:"1: its inputs left Redis"`
	Needs            string `lua:"needs" what:"what a node may hold for it, space-separated (jobspec.CacheNeeds)"`
	CachePassed      string `lua:"cache_passed" what:"claims that passed it over for a job their node held more of"`
	Weights          string `lua:"weights" what:"its model's weights in bytes, as estimated at submit (internal/fit)"`
	ColdSince        string `lua:"cold_since" what:"when a claim whose node lacked its weights first left it for a node that holds them (ms)"`
}

// jobField is the job record's field names as the service stores them.
var jobField = newRecord("")

// newRecord names every field of the record: its Lua name after prefix (tests rename them).
func newRecord(prefix string) jobFields {
	var r jobFields
	v := reflect.ValueOf(&r).Elem()
	for i := range v.NumField() {
		v.Field(i).SetString(prefix + v.Type().Field(i).Tag.Get("lua"))
	}
	return r
}

// fields are the record's fields in order: each one's Lua name and its name in the hash.
func (r jobFields) fields() (lua, stored []string) { return tableOf(r) }

// tableOf reads a record table (a struct of string fields tagged with their Lua names).
func tableOf(r any) (lua, stored []string) {
	v := reflect.ValueOf(r)
	for i := range v.NumField() {
		lua = append(lua, v.Type().Field(i).Tag.Get("lua"))
		stored = append(stored, v.Field(i).String())
	}
	return lua, stored
}

// fieldRef is a field as the Lua library writes it: F.<name> a job's, A.<name> an adapter's.
var fieldRef = regexp.MustCompile(`\b([FA])\.([A-Za-z_][A-Za-z0-9_]*)`)

// expandFields replaces every F.<name> (a job field) and A.<name> (an adapter field) of src by
// the field's name in its hash, quoted, and refuses a name its table does not have.
func (r jobFields) expandFields(src string) (string, error) {
	return expandTables(src, map[string]any{"F": r, "A": adapterField})
}

func expandTables(src string, tables map[string]any) (string, error) {
	names := map[string]map[string]string{}
	for letter, t := range tables {
		lua, stored := tableOf(t)
		names[letter] = make(map[string]string, len(lua))
		for i, n := range lua {
			names[letter][n] = stored[i]
		}
	}
	var bad []string
	out := fieldRef.ReplaceAllStringFunc(src, func(m string) string {
		letter, n, _ := strings.Cut(m, ".")
		s, ok := names[letter][n]
		if !ok {
			bad = append(bad, m)
			return m
		}
		return "'" + s + "'"
	})
	if len(bad) > 0 {
		return "", fmt.Errorf("queue: the Lua library names fields their record does not have: %s", strings.Join(bad, ", "))
	}
	return out, nil
}

// luaFieldIDs is FIELD_ID for the library: each field's Lua name by its name in the hash.
func (r jobFields) luaFieldIDs() string {
	lua, stored := r.fields()
	var b strings.Builder
	b.WriteString("-- Generated from queue/record.go: each job field's Lua name by its name in the hash.\nlocal FIELD_ID = {")
	for i := range lua {
		fmt.Fprintf(&b, "[%q] = %q, ", stored[i], lua[i])
	}
	b.WriteString("}\n")
	return b.String()
}

// claimed are the job fields a claim answers with, in their order: claim.lua's CLAIMED is
// generated from it (luaClaimed).
func (r jobFields) claimed() []string {
	return []string{r.ID, r.Org, r.Kind, r.Name, r.Status, r.Attempt, r.MaxAttempts, r.ResumeStep,
		r.CreatedAt, r.UpdatedAt, r.AgentID}
}

// adapterFields are the fields of an adapter's hash (deployments.go): the weights of one
// committed checkpoint step, and where and how they are served. The Lua writes each as
// A.<name>.
type adapterFields struct {
	ID               string `lua:"id" what:"the adapter's id"`
	Org              string `lua:"org" what:"the organization that owns it (its job's)"`
	Job              string `lua:"job" what:"the job whose checkpoint it is"`
	Step             string `lua:"step" what:"the checkpoint's step"`
	Base             string `lua:"base" what:"the base model it is served on"`
	Kind             string `lua:"kind" what:"lora (served beside others of its base) or full (a server of its own)"`
	Name             string `lua:"name" what:"its job's name"`
	Status           string `lua:"status" what:"READY: its weights are committed"`
	Deployment       string `lua:"deployment" what:"NOT_DEPLOYED, DEPLOYING, DEPLOYED, UNLOADING, DEPLOY_FAILED, UNLOAD_FAILED"`
	Server           string `lua:"server" what:"the serve job that holds or is to hold it"`
	Node             string `lua:"node" what:"the agent that serves it"`
	Error            string `lua:"error" what:"why its deployment failed"`
	Idle             string `lua:"idle" what:"1: unloaded for being idle; the next request deploys it again"`
	CreatedAt        string `lua:"created_at" what:"when it was filed (ms)"`
	UpdatedAt        string `lua:"updated_at" what:"when it last changed (ms)"`
	DeployedAt       string `lua:"deployed_at" what:"when it was last deployed (ms)"`
	UsedAt           string `lua:"used_at" what:"when a request last reached it (ms)"`
	Requests         string `lua:"requests" what:"requests served"`
	Failures         string `lua:"failures" what:"requests that failed"`
	PromptTokens     string `lua:"prompt_tokens" what:"prompt tokens served"`
	CompletionTokens string `lua:"completion_tokens" what:"completion tokens served"`
}

// adapterField is the adapter record's field names as the service stores them.
var adapterField = newAdapterRecord()

func newAdapterRecord() adapterFields {
	var r adapterFields
	v := reflect.ValueOf(&r).Elem()
	for i := range v.NumField() {
		v.Field(i).SetString(v.Type().Field(i).Tag.Get("lua"))
	}
	return r
}
