package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/blob"
)

// A job's inputs — its config and sealed secrets — are in Redis while it lives, and leave it
// when it ends (mark_ended, prelude.lua): its secrets go, and its config if it is bigger than
// KeepConfigBytes (a smaller one stays: lists show it). The queue writes a copy to object
// storage at submit (inputsKey), which a restart puts back, a fork reads the secrets of and a
// reader of a big config reads, and which goes with the job (archive, delete). Without object
// storage (Config.Store nil) inputs stay in Redis until the job is deleted.

// What an organization holds in Redis is counted (its `rbytes`, prelude.lua's charge) and
// bounded (Config.MaxOrgBytes): a job's record, its inputs while they are kept, its events.
const (
	// KeepConfigBytes is the biggest config an ended job keeps in Redis.
	KeepConfigBytes = 4 << 10
	// JobBytes is what a job's record counts for (its hash, indices and progress).
	JobBytes = 1 << 10
	// EventBytes is what an event counts for beside its length.
	EventBytes = 48
	// DefaultMaxOrgBytes is what one organization may hold in Redis unless the operator says.
	DefaultMaxOrgBytes = 64 << 20
)

// luaBytes are the constants above as the Lua library reads them.
func luaBytes() string {
	return fmt.Sprintf("-- Generated from queue/inputs.go.\nlocal KEEP_CFG, JOB_BYTES, EVENT_BYTES = %d, %d, %d\n", KeepConfigBytes, JobBytes, EventBytes)
}

// inputsVersion is the format of an inputs object; a reader refuses another.
const inputsVersion = 1

// inputs is the copy of a job's inputs object storage keeps.
type inputs struct {
	Version int    `json:"version"`
	Config  string `json:"config"`
	Secrets string `json:"secrets,omitempty"` // sealed
}

// inputsKey is where job id's inputs are kept: outside jobs/{id}/, where its agent writes.
func inputsKey(id string) string { return "archive/inputs/" + id + ".json" }

// putInputs writes a job's inputs to object storage.
func (c *store) putInputs(ctx context.Context, id, config, secrets string) error {
	b, err := json.Marshal(inputs{Version: inputsVersion, Config: config, Secrets: secrets})
	if err != nil {
		return err
	}
	if err := c.cfg.Store.Put(ctx, inputsKey(id), bytes.NewReader(b)); err != nil {
		return fmt.Errorf("queue: keep job %s's inputs: %w", id, err)
	}
	return nil
}

// readInputs reads the copy of job id's inputs; nil where there is none (no object storage, or
// a job submitted before copies were kept).
func (c *store) readInputs(ctx context.Context, id string) (*inputs, error) {
	if c.cfg.Store == nil {
		return nil, nil
	}
	rc, err := c.cfg.Store.Get(ctx, inputsKey(id))
	if errors.Is(err, blob.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("queue: job %s's inputs: %w", id, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("queue: job %s's inputs: %w", id, err)
	}
	var in inputs
	if err := json.Unmarshal(b, &in); err != nil || in.Version != inputsVersion {
		return nil, fmt.Errorf("queue: job %s's inputs do not read (version %d): %v", id, in.Version, err)
	}
	return &in, nil
}

// dropInputs deletes the copy of job id's inputs.
func (c *store) dropInputs(ctx context.Context, id string) error {
	if c.cfg.Store == nil {
		return nil
	}
	if err := c.cfg.Store.Delete(ctx, inputsKey(id)); err != nil && !errors.Is(err, blob.ErrNotFound) {
		return fmt.Errorf("queue: delete job %s's inputs: %w", id, err)
	}
	return nil
}

// restoreInputs puts an ended job's inputs back in Redis from their copy, where they left it,
// for a restart (restart.lua counts them again). The mark it leaves names the end they were
// restored after, so that a slow settle of that end does not take them out again (put_own).
func (c *store) restoreInputs(ctx context.Context, id string, hash map[string]string) error {
	if hash[jobField.Shed] != "1" {
		return nil
	}
	kept, err := c.rdb.MGet(ctx, c.keys.own(id, "owncfg"), c.keys.own(id, "ownsec")).Result()
	if err != nil {
		return fmt.Errorf("queue: restart %s: %w", id, err)
	}
	cfg, _ := kept[0].(string)
	sec, _ := kept[1].(string)
	if cfg != "" && (sec != "" || hash[jobField.SecBytes] == "0" || hash[jobField.SecBytes] == "") {
		return nil // nothing of them left Redis (a small config, no secrets)
	}
	in, err := c.readInputs(ctx, id)
	if err != nil || in == nil {
		return err
	}
	// The end they are restored after: its time and its number of events (two ends may share
	// a millisecond, never an event count).
	events, err := c.rdb.LLen(ctx, c.keys.events(id)).Result()
	if err == nil && events == 0 {
		events, err = c.rdb.LLen(ctx, c.keys.own(id, "ownev")).Result()
	}
	if err != nil {
		return fmt.Errorf("queue: restart %s: %w", id, err)
	}
	_, err = c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, c.keys.own(id, "owncfg"), in.Config, 0)
		if in.Secrets != "" {
			p.Set(ctx, c.keys.own(id, "ownsec"), in.Secrets, 0)
		}
		p.Set(ctx, c.keys.own(id, "ownrestored"), hash[jobField.FinishedAt]+"|"+strconv.FormatInt(events, 10), 0)
		return nil
	})
	if err != nil {
		return fmt.Errorf("queue: restart %s: put its inputs back: %w", id, err)
	}
	return nil
}

// heldBytes is what an ended job still holds in Redis by its org's count, for the archiver and
// a delete to give back: its record, its events, and the inputs it kept. (A job from before
// the count has no sizes in its hash: its inputs count for nothing.)
func heldBytes(hash map[string]string, events []string) int64 {
	n := int64(JobBytes)
	for _, e := range events {
		n += int64(len(e) + EventBytes)
	}
	cfg, _ := strconv.ParseInt(hash[jobField.CfgBytes], 10, 64)
	sec, _ := strconv.ParseInt(hash[jobField.SecBytes], 10, 64)
	switch {
	case hash[jobField.Shed] != "1":
		n += cfg + sec
	case cfg <= KeepConfigBytes:
		n += cfg
	}
	return n
}

// jobHash is a job's hash as readers take it: the queue's copy while there is one, else its own
// slot's (empty where there is neither).
func (c *store) jobHash(ctx context.Context, id string) (map[string]string, error) {
	h, err := c.rdb.HGetAll(ctx, c.keys.job(id)).Result()
	if err != nil || len(h) > 0 {
		return h, err
	}
	return c.rdb.HGetAll(ctx, c.keys.own(id, "ownjob")).Result()
}
