// Package initbench measures each Lambda function's cold start: from process start to its
// first request for an event on the Lambda Runtime API (the function's spec is loaded and
// router built by then), against a stand-in Runtime API that only records that request. It
// also reports each bootstrap's size as `make lambda` builds it. `make bench-lambda` runs it.
package initbench

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/redistest"
	"github.com/hostedtrain/hostedtrain/internal/seal"
)

var functions = []string{"api", "webhooks", "reaper"}

func build(b *testing.B, name, goarch, out string) {
	b.Helper()
	cmd := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w -buildid=",
		"-o", out, "github.com/hostedtrain/hostedtrain/functions/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if o, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build %s: %v\n%s", name, err, o)
	}
}

func BenchmarkColdStart(b *testing.B) {
	rs := redistest.Start(b)
	keys, err := auth.NewKeySet()
	if err != nil {
		b.Fatal(err)
	}
	sealKey, err := seal.NewKey("k1")
	if err != nil {
		b.Fatal(err)
	}
	env := append(os.Environ(),
		"HOSTEDTRAIN_REDIS_URL=redis://"+rs.Addr+"/0",
		"HOSTEDTRAIN_JWT_KEYS="+keys.String(),
		"HOSTEDTRAIN_SECRETS_KEYS="+sealKey,
	)
	// The stand-in Runtime API: it notes when a function first asks for an event and never
	// answers (the process is killed once measured).
	ready := make(chan time.Time, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/2018-06-01/runtime/invocation/next" {
			select {
			case ready <- time.Now():
			default:
			}
		}
		<-r.Context().Done()
	})}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { srv.Close() })
	env = append(env, "AWS_LAMBDA_RUNTIME_API="+ln.Addr().String(), "AWS_REGION=eu-west-1")

	dir := b.TempDir()
	for _, name := range functions {
		host := filepath.Join(dir, name)
		build(b, name, hostArch(), host)
		arm := filepath.Join(dir, name+".arm64")
		build(b, name, "arm64", arm)
		st, err := os.Stat(arm)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				cmd := exec.Command(host)
				cmd.Env = env
				began := time.Now()
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				select {
				case at := <-ready:
					total += at.Sub(began)
				case <-time.After(10 * time.Second):
					_ = cmd.Process.Kill()
					b.Fatalf("%s never asked for an event", name)
				}
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/init")
			b.ReportMetric(float64(st.Size())/(1<<20), "MiB/bootstrap")
		})
	}
}

func hostArch() string {
	out, err := exec.Command("go", "env", "GOARCH").Output()
	if err != nil {
		panic(fmt.Sprintf("go env GOARCH: %v", err))
	}
	return string(out[:len(out)-1])
}
