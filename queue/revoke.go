package queue

import (
	"context"
	"errors"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/redis/go-redis/v9"
)

// revocationMargin is kept past a revoked token's expiry and the verifier's leeway, for clocks
// that differ between the API's instances and Redis.
const revocationMargin = time.Minute

// RevokeToken refuses the token with id jti from now until until (its expiry) and the
// verifier's leeway after it: only then is the token refused anyway, and the entry goes.
// However long the token lives, so does the entry.
func (c *Client) RevokeToken(ctx context.Context, jti string, until time.Time) error {
	if jti == "" {
		return errors.New("queue: revoke: empty token id")
	}
	ttl := time.Until(until) + auth.Leeway + revocationMargin
	if ttl <= revocationMargin {
		return nil
	}
	return c.rdb.Set(ctx, c.keys.revoked(jti), 1, ttl).Err()
}

// TokenRevoked reports whether the token with id jti is revoked.
func (c *Client) TokenRevoked(ctx context.Context, jti string) (bool, error) {
	err := c.rdb.Get(ctx, c.keys.revoked(jti)).Err()
	switch {
	case errors.Is(err, redis.Nil):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}
