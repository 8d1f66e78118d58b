package queue

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// ErrUnavailable marks an error of a Redis call that says Redis cannot serve now rather than
// that the request was wrong: it is unreachable or went away, is loading its data, failing
// over, read-only, out of memory (noeviction refuses writes), or the pool waited too long for
// a connection. Such a request may succeed if tried again later; the API answers it with 503
// and Retry-After. Only errors of Redis calls carry it — object storage's and STS's do not.
var ErrUnavailable = errors.New("the job store is unavailable")

// storeUnavailable is a Redis error marked with ErrUnavailable.
type storeUnavailable struct{ err error }

func (e *storeUnavailable) Error() string        { return e.err.Error() }
func (e *storeUnavailable) Unwrap() error        { return e.err }
func (e *storeUnavailable) Is(target error) bool { return target == ErrUnavailable }

// marker is the go-redis hook that marks the errors of every call a client makes (New installs
// it once per client): the queue's, and those of whoever shares the client (webhooks).
type marker struct{}

var marked sync.Map // clients with the marker: redis.UniversalClient -> true

func markUnavailable(rdb redis.UniversalClient) {
	if _, loaded := marked.LoadOrStore(rdb, true); !loaded {
		rdb.AddHook(marker{})
	}
}

func (marker) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		return conn, mark(err)
	}
}

func (marker) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if m := mark(err); m != err {
			cmd.SetErr(m)
			return m
		}
		return err
	}
}

func (marker) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if m := mark(cmd.Err()); m != cmd.Err() {
				cmd.SetErr(m)
			}
		}
		return mark(err)
	}
}

// mark marks err with ErrUnavailable if it says Redis cannot serve now.
func mark(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || !unavailable(err) {
		return err
	}
	return &storeUnavailable{err}
}

func unavailable(err error) bool {
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
