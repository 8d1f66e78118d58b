package queue

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Unavailable reports whether err says Redis cannot serve now rather than that a request was
// wrong: it is unreachable or went away, is loading its data, failing over, read-only, out of
// memory (noeviction refuses writes), or the pool waited too long for a connection. Such a
// request may succeed if tried again later; the API answers it with 503 and Retry-After.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var netErr net.Error
	var opErr *net.OpError
	switch {
	case errors.As(err, &opErr), errors.As(err, &netErr),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, context.DeadlineExceeded):
		return true
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := strings.TrimPrefix(rerr.Error(), "ERR ")
		for _, code := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "OOM", "BUSY"} {
			if strings.HasPrefix(msg, code) {
				return true
			}
		}
	}
	return false
}
