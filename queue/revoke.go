package queue

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/auth"
)

// revocationMargin is kept past a revoked token's expiry and the verifier's leeway, for clocks
// that differ between the API's instances and Redis.
const revocationMargin = time.Minute

// Revoked tokens are checked on every authenticated request, so each process keeps its own
// copy of them and refreshes it from Redis at most every RevocationStaleness — one round trip
// a second per process, not one per request. Redis keeps, besides the key of each revoked
// token (revoked:<jti>, with a TTL), two sorted sets: every revocation by when it ends (a
// process loads them all when it starts, or when it has not refreshed for revocationLogKeep),
// and the recent ones by when they were made (the log a refresh reads on from where it left
// off).
const (
	// revocationLogKeep is how long a revocation stays in the log of recent ones.
	revocationLogKeep = 10 * time.Minute
	// revocationSkew is read again at each refresh: revocations made by a process whose clock
	// is behind this one's.
	revocationSkew = 30 * time.Second
)

type revocations struct {
	mu         sync.Mutex
	refreshing bool                 // a check is reading Redis for the copy
	known      map[string]time.Time // jti -> until when it is refused
	synced     time.Time            // when the copy was last refreshed (the client's clock)
	since      int64                // when (this reader's clock, ms) the copy last read the log
}

// RevokeToken refuses the token with id jti from now until until (its expiry) and the
// verifier's leeway after it: only then is the token refused anyway, and the entry goes.
// However long the token lives, so does the entry. Other processes refuse it within
// RevocationStaleness; this one at once.
func (c Tokens) RevokeToken(ctx context.Context, jti string, until time.Time) error {
	if jti == "" {
		return errors.New("queue: revoke: empty token id")
	}
	ttl := time.Until(until) + auth.Leeway + revocationMargin
	if ttl <= revocationMargin {
		return nil
	}
	end := time.Now().Add(ttl)
	now := c.cfg.Now()
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, c.keys.revoked(jti), 1, ttl)
		p.ZAdd(ctx, c.keys.fixed("REVOKED"), redis.Z{Score: float64(end.UnixMilli()), Member: jti})
		p.ZAdd(ctx, c.keys.fixed("REVOKED_LOG"), redis.Z{Score: float64(ms(now)), Member: jti + " " + strconv.FormatInt(end.UnixMilli(), 10)})
		p.ZRemRangeByScore(ctx, c.keys.fixed("REVOKED"), "-inf", strconv.FormatInt(time.Now().UnixMilli(), 10))
		p.ZRemRangeByScore(ctx, c.keys.fixed("REVOKED_LOG"), "-inf", strconv.FormatInt(ms(now.Add(-revocationLogKeep)), 10))
		return nil
	})
	if err != nil {
		return err
	}
	c.revoked.mu.Lock()
	if c.revoked.known != nil {
		c.revoked.known[jti] = end
	}
	c.revoked.mu.Unlock()
	return nil
}

// TokenRevoked reports whether the token with id jti is revoked, from this process's copy of
// the revocations, refreshed first if it is older than RevocationStaleness. While one check
// refreshes the copy, the others answer from it rather than wait on Redis; a refresh that fails
// leaves the copy as it was, for the next check to try again. Only the first load, with no copy
// yet, makes every check wait.
func (c Tokens) TokenRevoked(ctx context.Context, jti string) (bool, error) {
	r := &c.revoked
	now := c.cfg.Now()
	r.mu.Lock()
	due := r.known == nil || now.Sub(r.synced) >= c.cfg.RevocationStaleness || now.Before(r.synced)
	if due && (r.known == nil || !r.refreshing) {
		first := r.known == nil
		full := first || now.Sub(r.synced) >= revocationLogKeep-revocationSkew || now.Before(r.synced)
		from := r.since - revocationSkew.Milliseconds()
		r.refreshing = true
		if !first {
			r.mu.Unlock()
		}
		zs, err := c.fetchRevocations(ctx, full, from)
		if !first {
			r.mu.Lock()
		}
		r.refreshing = false
		switch {
		case err == nil:
			r.apply(full, zs, now)
		case r.known == nil:
			r.mu.Unlock()
			return false, err
		}
	}
	until, ok := r.known[jti]
	r.mu.Unlock()
	return ok && time.Now().Before(until), nil
}

// fetchRevocations reads the whole set of revocations (full), or the log of recent ones from
// from (ms) on.
func (c *store) fetchRevocations(ctx context.Context, full bool, from int64) ([]redis.Z, error) {
	if full {
		return c.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
			Key: c.keys.fixed("REVOKED"), ByScore: true, Start: strconv.FormatInt(time.Now().UnixMilli(), 10), Stop: "+inf",
		}).Result()
	}
	return c.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
		Key: c.keys.fixed("REVOKED_LOG"), ByScore: true, Start: strconv.FormatInt(from, 10), Stop: "+inf",
	}).Result()
}

// apply brings the copy up to date with what fetchRevocations read at now: the whole set, or
// the log's recent entries ("<jti> <end ms>"). r.mu is held.
func (r *revocations) apply(full bool, zs []redis.Z, now time.Time) {
	if full {
		r.known = make(map[string]time.Time, len(zs))
		for _, z := range zs {
			jti, _ := z.Member.(string)
			r.known[jti] = time.UnixMilli(int64(z.Score))
		}
	} else {
		wall := time.Now()
		for jti, until := range r.known {
			if !wall.Before(until) {
				delete(r.known, jti)
			}
		}
		for _, z := range zs {
			m, _ := z.Member.(string)
			jti, end, ok := strings.Cut(m, " ")
			if n, err := strconv.ParseInt(end, 10, 64); ok && err == nil {
				r.known[jti] = time.UnixMilli(n)
			}
		}
	}
	// On from this reader's own clock, never from the writers': one whose clock runs ahead
	// would move it past what writers with right clocks revoke next.
	r.since, r.synced = ms(now), now
}
