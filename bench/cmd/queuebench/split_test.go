package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/redisproc"
)

func redisCPU(ctx context.Context, rdb *redis.Client) float64 {
	info, _ := rdb.Info(ctx, "cpu").Result()
	total := 0.0
	for _, l := range strings.Split(info, "\r\n") {
		if strings.HasPrefix(l, "used_cpu_sys:") || strings.HasPrefix(l, "used_cpu_user:") {
			v, _ := strconv.ParseFloat(l[strings.Index(l, ":")+1:], 64)
			total += v
		}
	}
	return total
}

func selfCPU() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func TestSplit(t *testing.T) {
	dir, _ := os.MkdirTemp("", "split")
	ctx := context.Background()
	srv, _ := redisproc.Start(ctx, redisproc.Options{Dir: dir})
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
	b := &bench{ctx: ctx, rdb: rdb, addr: srv.Addr, out: nil}
	for _, name := range []string{"asynq", "ours"} {
		r0, s0, w0 := redisCPU(ctx, rdb), selfCPU(), time.Now()
		if name == "asynq" {
			b.asynqLifecycle(20000, 16)
		} else {
			b.ourLifecycle(20000, 16)
		}
		r1, s1, w1 := redisCPU(ctx, rdb), selfCPU(), time.Now()
		t.Logf("%s: wall %.2fs, redis CPU %.2fs (%.0f µs/job), client CPU %.2fs (%.0f µs/job)", name, w1.Sub(w0).Seconds(),
			r1-r0, (r1-r0)/20000*1e6, s1-s0, (s1-s0)/20000*1e6)
	}
}
