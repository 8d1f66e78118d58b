package queue

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxRevocation bounds how long a revocation is kept: no token lives longer.
const maxRevocation = 366 * 24 * time.Hour

// RevokeToken refuses the token with id jti from now until until (its expiry: after it the
// token is refused anyway, and the entry goes).
func (c *Client) RevokeToken(ctx context.Context, jti string, until time.Time) error {
	if jti == "" {
		return errors.New("queue: revoke: empty token id")
	}
	ttl := time.Until(until)
	if ttl <= 0 {
		return nil
	}
	return c.rdb.Set(ctx, c.keys.revoked(jti), 1, min(ttl, maxRevocation)).Err()
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
