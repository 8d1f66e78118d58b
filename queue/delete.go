package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/redis/go-redis/v9"
)

// BeginDelete marks a job that ended as being deleted, before the caller deletes anything of
// it: from then on the job cannot be restarted or forked (ErrDeleting), so a delete never finds
// it live after its data is gone. A live job is job.ErrConflict (stop it first) and nothing is
// marked; one that is not there, job.ErrNotFound. The mark goes with the job (Delete).
func (c Jobs) BeginDelete(ctx context.Context, id string) error {
	j, err := c.Get(ctx, id)
	if err != nil {
		return err
	}
	if !j.Status.Terminal() {
		return fmt.Errorf("queue: delete: job is %s: %w", j.Status, job.ErrConflict)
	}
	if err := c.call(ctx, "delete_begin", c.keys.job(id), args{"id": id}).Err(); err != nil {
		return scriptErr("delete", err)
	}
	return nil
}

// Delete forgets a job that ended (COMPLETED, FAILED or STOPPED): its entries in its
// organization's indices, its hash, config, secrets, progress and events, and its archived
// record, and its entry in the organization's stored bytes. A live job is job.ErrConflict (stop it first); one that is not there,
// job.ErrNotFound. The organization's GPU time is not given back: usage counts what ran.
//
// The job's data in object storage (metrics, logs, checkpoints, rollouts) is the caller's to
// delete first (the API does), so that a delete that fails half way is finished by asking
// again. Delete leaves nothing half-forgotten itself: the queue forgets the job in one
// function call (the archiver's, archive.lua), and the own keys it leaves are deleted at once
// or, after a crash, by the archiver's next run (DROPPING).
func (c Jobs) Delete(ctx context.Context, id string) error {
	j, err := c.Get(ctx, id)
	if err != nil {
		return err
	}
	if !j.Status.Terminal() {
		return fmt.Errorf("queue: delete: job is %s: %w", j.Status, job.ErrConflict)
	}
	if c.cfg.Store != nil {
		if err := c.cfg.Store.Delete(ctx, archiveKey(id)); err != nil && !errors.Is(err, blob.ErrNotFound) {
			return fmt.Errorf("queue: delete %s: record: %w", id, err)
		}
	}
	// An ended job moves to its own slot before the queue forgets it, as the archiver's do.
	if !c.migrated.done.Load() {
		if err := c.migrateJobs(ctx, []string{id}); err != nil {
			return err
		}
	}
	if _, err := c.settleOne(ctx, id, false); err != nil {
		return err
	}
	rec, err := c.readRecord(ctx, id, true)
	if err != nil {
		return fmt.Errorf("queue: delete %s: %w", id, err)
	}
	// Its data went first (the caller's), so it keeps nothing in storage now; this goes before
	// the queue forgets it, so that a delete that fails after is finished by asking again.
	if err := c.fileStored(ctx, j.Org, id, "drop", 0); err != nil {
		return err
	}
	if len(rec.hash) == 0 {
		// Not in Redis: an archived job, whose record is gone now.
		return c.finishDelete(ctx, id)
	}
	n, err := c.call(ctx, "archive", c.keys.job(id), args{"id": id, "finished_at": rec.hash[jobField.FinishedAt], "org": rec.hash[jobField.Org],
		"bytes": heldBytes(rec.hash, rec.events)}).Int()
	if err != nil {
		return scriptErr("delete", err)
	}
	if n == 0 {
		return fmt.Errorf("queue: delete %s: it was restarted meanwhile: %w", id, job.ErrConflict)
	}
	return c.finishDelete(ctx, id)
}

// finishDelete deletes what is left of a job the queue forgot: its own keys and its inputs'
// copy, then its delete's mark.
func (c *store) finishDelete(ctx context.Context, id string) error {
	if err := c.dropOwn(ctx, id); err != nil {
		return err
	}
	if err := c.dropInputs(ctx, id); err != nil {
		return err
	}
	if err := c.rdb.Del(ctx, c.keys.of("deletingkey", id)).Err(); err != nil {
		return fmt.Errorf("queue: delete %s: %w", id, err)
	}
	return nil
}

// SealedSecrets are a job's secrets as its submit sealed them ("" if it had none, or they went
// with it when it was archived): for a fork, which opens and seals them again for itself. Those
// of a job that ended are read from their copy in object storage (inputs.go).
func (c Jobs) SealedSecrets(ctx context.Context, id string) (string, error) {
	// one key at a time (the two are in different slots of a cluster), the old one first: the
	// migration writes the new one before it deletes the old (migrate.go)
	for _, k := range []string{c.keys.oldSecrets(id), c.keys.own(id, "ownsec")} {
		v, err := c.rdb.Get(ctx, k).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return "", fmt.Errorf("queue: secrets of %s: %w", id, err)
		}
		if v != "" {
			return v, nil
		}
	}
	in, err := c.readInputs(ctx, id)
	if err != nil || in == nil {
		return "", err
	}
	return in.Secrets, nil
}

// StopThenDelete is a delete of a job that may still be live, as Prime's backend does it: the
// job is stopped (Cancel) and marked to be deleted once it has ended; the reaper's
// DeleteEnded deletes it then, its data in storage with it. done says the job had already
// ended, so the caller may delete it at once.
func (c Jobs) StopThenDelete(ctx context.Context, id string) (done bool, err error) {
	j, err := c.Get(ctx, id)
	if err != nil {
		return false, err
	}
	if j.Status.Terminal() {
		return true, nil
	}
	if err := c.rdb.SAdd(ctx, c.keys.fixed("DELETE_ON_END"), id).Err(); err != nil {
		return false, fmt.Errorf("queue: stop then delete %s: %w", id, err)
	}
	if _, err := c.Cancel(ctx, id); err != nil && !errors.Is(err, job.ErrConflict) {
		// Not stopped: not to be deleted either (the caller is told the delete failed).
		_ = c.rdb.SRem(ctx, c.keys.fixed("DELETE_ON_END"), id).Err()
		return false, err
	}
	j, err = c.Get(ctx, id)
	return err == nil && j.Status.Terminal(), err
}

// DeleteEnded deletes, with their data in storage, up to batch of the jobs StopThenDelete
// marked that have ended since; those still stopping stay marked. It reports how many went.
func (c Maintenance) DeleteEnded(ctx context.Context, batch int) (int, error) {
	// A random sample each pass: jobs still stopping never keep the others waiting.
	ids, err := c.rdb.SRandMemberN(ctx, c.keys.fixed("DELETE_ON_END"), int64(batch)).Result()
	if err != nil {
		return 0, fmt.Errorf("queue: delete ended: %w", err)
	}
	n := 0
	var failed error
	for _, id := range ids {
		err := c.deleteEnded(ctx, id)
		switch {
		case errors.Is(err, job.ErrNotFound):
		case errors.Is(err, job.ErrConflict), errors.Is(err, ErrDeleting):
			continue // still stopping, or restarted: the next pass, or never
		case err != nil:
			failed = errors.Join(failed, err) // this job the next pass; the others now
			continue
		default:
			n++
		}
		if err := c.rdb.SRem(ctx, c.keys.fixed("DELETE_ON_END"), id).Err(); err != nil {
			return n, fmt.Errorf("queue: delete ended: %w", err)
		}
	}
	return n, failed
}

// deleteEnded deletes one job that has ended, as the API's delete does: marked first, its
// data in storage, then the job.
func (c Maintenance) deleteEnded(ctx context.Context, id string) error {
	if err := Jobs(c).BeginDelete(ctx, id); err != nil {
		return err
	}
	// Its deployments go first: their weights are the job's data.
	if org, err := c.orgOf(ctx, id); err != nil {
		return err
	} else if org != "" {
		if _, err := Deployments(c).ForgetJob(ctx, org, id); err != nil {
			return err
		}
	}
	if c.cfg.Store != nil {
		if _, err := jobdata.DeleteJob(ctx, c.cfg.Store, id); err != nil {
			return fmt.Errorf("queue: delete %s's data: %w", id, err)
		}
	}
	return Jobs(c).Delete(ctx, id)
}
