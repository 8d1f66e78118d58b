package queue

import (
	"fmt"
	"strings"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

// An organization's jobs are indexed by kind, status and creation time (orgindex, a sorted
// set): score = (kind code * len(statusCodes) + status code) * rankBase + the creation time in
// the job's UUIDv7 id (ms). So the jobs of one kind and status, newest first, are one range of
// scores, and List with filters reads only the jobs that pass them. The Lua side's codes are
// generated from these tables (luaIndexCodes).

var kindCodes = []string{jobspec.KindRL, jobspec.KindGEPA, jobspec.KindEval}

var statusCodes = []job.Status{job.Queued, job.Pending, job.Running, job.Completed, job.Failed, job.Stopped}

// kindOther is the code of a kind kindCodes does not name.
var kindOther = len(kindCodes)

// rankBase spaces the codes apart: 2^42 ms is 139 years (prelude.lua's RANK_BASE).
const rankBase = int64(1) << 42

func kindCode(kind string) int {
	for i, k := range kindCodes {
		if k == kind {
			return i
		}
	}
	return kindOther
}

func statusCode(s job.Status) int {
	for i, st := range statusCodes {
		if st == s {
			return i
		}
	}
	return -1
}

// indexCode is the code of jobs of a kind (kindCode) in a status.
func indexCode(kind int, s job.Status) int64 {
	return int64(kind*len(statusCodes) + statusCode(s))
}

func luaIndexCodes() string {
	var b strings.Builder
	b.WriteString("-- Generated from queue/index.go: the codes of List's index.\nlocal KIND_CODE = {")
	for i, k := range kindCodes {
		fmt.Fprintf(&b, "[%q] = %d, ", k, i)
	}
	fmt.Fprintf(&b, "}\nlocal KIND_OTHER, STATUSES = %d, %d\nlocal STATUS_CODE = {", kindOther, len(statusCodes))
	for i, s := range statusCodes {
		fmt.Fprintf(&b, "[%q] = %d, ", s, i)
	}
	b.WriteString("}\n")
	return b.String()
}
