// Package mototest starts moto's server (python3 -m moto.server), the open-source AWS
// emulator, on a free port of 127.0.0.1 for the tests of what hostedtrain asks of STS and
// Secrets Manager, and stops it when the test ends. `make test` makes sure moto is installed; a
// missing moto fails the test rather than skipping it.
package mototest

import (
	"fmt"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/redisproc"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
)

// Server is a running moto server. Any access key is accepted.
type Server struct {
	Endpoint string // http://127.0.0.1:PORT
}

// Start runs moto's server for the rest of t.
func Start(t testing.TB) *Server {
	t.Helper()
	port, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "moto.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", "-m", "moto.server", "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("mototest: start moto (make test installs it): %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		logf.Close()
	})
	s := &Server{Endpoint: "http://127.0.0.1:" + strconv.Itoa(port)}
	client := &http.Client{Timeout: time.Second}
	up := func() bool {
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("mototest: moto exited (is it installed? make test installs it):\n%s", b)
		default:
		}
		resp, err := client.Get(s.Endpoint + "/moto-api/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	}
	testwait.Until(t, 60*time.Second, fmt.Sprintf("moto to answer on %s", s.Endpoint), up)
	return s
}

// AWSConfig is an SDK configuration that sends every service's requests to the server.
func (s *Server) AWSConfig() aws.Config {
	return aws.Config{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(s.Endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("testing", "testing", ""),
	}
}
