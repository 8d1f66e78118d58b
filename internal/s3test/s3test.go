// Package s3test starts a real S3-compatible server for tests and benchmarks: versitygw with
// its posix backend, on a free port of 127.0.0.1, storing into a temporary directory, and
// stopped when the test ends. There is no S3 mock in this project.
//
// `make test` installs versitygw (go install github.com/versity/versitygw/cmd/versitygw@v1.8.0);
// a missing binary fails the test rather than skipping it.
package s3test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/redisproc"
)

// Version is the versitygw release the tests run against.
const Version = "v1.8.0"

// ErrNoBinary is returned when versitygw is not installed.
var ErrNoBinary = errors.New("versitygw not found on PATH or in $(go env GOPATH)/bin: run `make test`, which installs it " +
	"(go install github.com/versity/versitygw/cmd/versitygw@" + Version + ")")

// Binary finds versitygw: on PATH, else where `go install` puts it.
func Binary() (string, error) {
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	var dirs []string
	if gobin := os.Getenv("GOBIN"); gobin != "" {
		dirs = append(dirs, gobin)
	}
	if gopath := os.Getenv("GOPATH"); gopath != "" {
		dirs = append(dirs, filepath.Join(filepath.SplitList(gopath)[0], "bin"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "versitygw")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", ErrNoBinary
}

// Server is a running versitygw.
type Server struct {
	Endpoint  string // http://127.0.0.1:PORT
	AccessKey string
	SecretKey string
	Region    string
	Dir       string // the posix backend's root: one folder per bucket

	cmd      *exec.Cmd
	done     chan struct{}
	stopOnce sync.Once
}

// StartServer runs versitygw over dir and returns once it answers HTTP.
func StartServer(ctx context.Context, dir string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 { // a free port can be taken between the probe and the bind
		port, err := redisproc.FreePort()
		if err != nil {
			return nil, err
		}
		s, err := start(ctx, bin, dir, port)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func start(ctx context.Context, bin, dir string, port int) (*Server, error) {
	s := &Server{
		Endpoint:  "http://127.0.0.1:" + strconv.Itoa(port),
		AccessKey: "hostedtrain-test",
		SecretKey: "hostedtrain-test-secret",
		Region:    "us-east-1",
		Dir:       dir,
		done:      make(chan struct{}),
	}
	logf, err := os.OpenFile(filepath.Join(filepath.Dir(dir), filepath.Base(dir)+".versitygw.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	s.cmd = exec.Command(bin, "--access", s.AccessKey, "--secret", s.SecretKey, "--region", s.Region,
		"--port", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), "--quiet", "posix", dir)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("s3test: start versitygw: %w", err)
	}
	go func() {
		_ = s.cmd.Wait()
		logf.Close()
		close(s.done)
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-s.done:
			log, _ := os.ReadFile(logf.Name())
			return nil, fmt.Errorf("s3test: versitygw on port %d exited: %s", port, log)
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		default:
		}
		if resp, err := http.Get(s.Endpoint + "/"); err == nil {
			resp.Body.Close()
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("s3test: versitygw on port %d did not answer in 15 s", port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PID is the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Stop ends the server and waits for it. Safe to call more than once.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
	})
}

// Config is a store configuration for bucket on this server.
func (s *Server) Config(bucket string) blob.S3Config {
	return blob.S3Config{Bucket: bucket, Endpoint: s.Endpoint, Region: s.Region, AccessKeyID: s.AccessKey, SecretAccessKey: s.SecretKey}
}

// Env is what the aws CLI needs in its environment to reach this server.
func (s *Server) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + s.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s.SecretKey, "AWS_DEFAULT_REGION=" + s.Region,
		"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null"}
}

// CreateBucket makes a bucket and returns a store over it.
func (s *Server) CreateBucket(ctx context.Context, bucket string) (*blob.S3, error) {
	st, err := blob.NewS3(ctx, s.Config(bucket))
	if err != nil {
		return nil, err
	}
	if _, err := st.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		return nil, fmt.Errorf("s3test: create bucket %s: %w", bucket, err)
	}
	return st, nil
}

// Start runs a private versitygw for t, stopped when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := StartServer(context.Background(), filepath.Join(t.TempDir(), "s3"))
	if err != nil {
		t.Fatalf("start S3 server: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

var buckets atomic.Int64

// Store starts a server for t and returns a store over a new bucket on it.
func Store(t testing.TB) (*blob.S3, *Server) {
	t.Helper()
	s := Start(t)
	st, err := s.CreateBucket(context.Background(), fmt.Sprintf("hostedtrain-test-%d", buckets.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	return st, s
}
