package queue

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// The job record's fields are named once (record.go): a field the Lua names that the table does
// not have fails the library's build, and with every field renamed in the table a job's whole
// life runs as before and leaves no field of the old names behind — which a name written as a
// literal anywhere in Go or Lua would.
func TestTheJobRecordIsNamedOnce(t *testing.T) {
	t.Run("a field renamed in the table fails the build", func(t *testing.T) {
		renamed := strings.ReplaceAll(prelude, "F.stop_requested", "F.stop_wanted")
		if _, err := jobField.expandFields(renamed); err == nil || !strings.Contains(err.Error(), "stop_wanted") {
			t.Fatalf("a library naming a field the record lacks built (err %v)", err)
		}
		if _, err := buildLibrary(jobField); err != nil {
			t.Fatalf("the library as it is: %v", err)
		}
	})

	t.Run("the Lua writes no field name as a literal", func(t *testing.T) {
		lua, _ := jobField.fields()
		adapter, _ := tableOf(adapterField)
		literal := regexp.MustCompile(`'(` + strings.Join(append(lua, adapter...), "|") + `)'`)
		files, err := filepath.Glob("lua/*.lua")
		if err != nil || len(files) < 10 {
			t.Fatalf("the library's files: %v %v", files, err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(string(data), "\n") {
				code, comment, _ := strings.Cut(line, "--")
				// A line that names something else (an org's field, a stream's) says so.
				if m := literal.FindString(code); m != "" && !strings.Contains(comment, "not a job field") &&
					!strings.Contains(comment, "not job fields") && !strings.Contains(comment, "not the job's") && !strings.Contains(comment, "not a field") {
					t.Errorf("%s:%d writes the field %s as a literal; write F.%s (a job's) or A.%[4]s (an adapter's)", f, i+1, m, strings.Trim(m, "'"))
				}
			}
		}
	})

	// Every field renamed: the package's table and library swapped for this test's subtests
	// (top-level tests that run in parallel start only after this one has returned).
	saved, savedLib := jobField, library
	t.Cleanup(func() { jobField, library = saved, savedLib })
	jobField = newRecord("x_")
	var err error
	if library, err = buildLibrary(jobField); err != nil {
		t.Fatal(err)
	}
	lives := []struct {
		name string
		run  func(*testing.T)
	}{
		{"submit", TestSubmitStoresQueuesAndRecords},
		{"claim", TestClaimFencesAndRecordsTheAgent},
		{"heartbeat", TestHeartbeatStartsRenewsChargesAndRecordsCheckpoints},
		{"complete and fail", TestCompleteAndFailEndTheJobAndRefund},
		{"cancel", TestCancel},
		{"lapsed lease", TestALapsedLeaseRetriesAfterABackoffThenFails},
		{"restart", TestRestart},
		{"release", TestReleaseRequeuesWithoutSpendingAnAttempt},
		{"time limit", TestATimeLimitStopsThenFailsTheJob},
		{"gpu time", TestGPUSecondsAreCounted},
		{"platform fault", TestAPlatformFaultIsRetriedElsewhere},
		{"avoid", TestAClaimPassesOverJobsThatAvoidIt},
		{"archive", TestArchiveAfterRetention},
		{"delete", TestDeleteForgetsAnEndedJob},
		{"stop then delete", TestStopThenDelete},
		{"settle", TestTheReaperSettlesWhatACrashLeft},
		{"inputs", TestAnEndedJobsInputsLeaveRedis},
	}
	// One group, so that the lives (parallel tests) have all ended when it returns.
	t.Run("lives", func(t *testing.T) {
		for _, life := range lives {
			t.Run(life.name, life.run)
		}
	})

	t.Run("no field of the old names is left", func(t *testing.T) {
		ctx := context.Background()
		var seen atomic.Int64
		for _, be := range backends {
			scan := func(ctx context.Context, c *redis.Client) error {
				iter := c.Scan(ctx, 0, "*", 1000).Iterator()
				for iter.Next(ctx) {
					key := iter.Val()
					if c.Type(ctx, key).Val() != "hash" {
						continue
					}
					h, err := c.HGetAll(ctx, key).Result()
					if err != nil {
						return err
					}
					if _, isJob := h["x_id"]; !isJob {
						continue
					}
					seen.Add(1)
					for f := range h {
						if !strings.HasPrefix(f, "x_") {
							t.Errorf("%s: job %s holds field %q, a name not in the record", be.name, key, f)
						}
					}
				}
				return iter.Err()
			}
			var err error
			if cc, ok := be.client.(*redis.ClusterClient); ok {
				err = cc.ForEachMaster(ctx, scan)
			} else {
				err = scan(ctx, be.client.(*redis.Client))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := seen.Load(); n < 20 {
			t.Fatalf("found %d job records written with the renamed fields; the lives above write more", n)
		}
	})
}
