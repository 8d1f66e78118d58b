package jobspec

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// envFolders lays out a job folder and a folder beside it, each with an env file whose value
// a test can look for.
type envFolders struct {
	job     string // the job file
	jobDir  string
	outside string // a folder beside the job's
}

const (
	insideSecret  = "sk-inside-0001"
	outsideSecret = "sk-outside-0002"
)

func setupEnvFolders(t *testing.T) envFolders {
	t.Helper()
	root := t.TempDir()
	f := envFolders{jobDir: filepath.Join(root, "job"), outside: filepath.Join(root, "home")}
	for _, d := range []string{f.jobDir, filepath.Join(f.jobDir, "keys"), f.outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(f.jobDir, "keys", "secrets.env"), "INSIDE_KEY="+insideSecret+"\n")
	write(t, filepath.Join(f.outside, "credentials.env"), "OUTSIDE_KEY="+outsideSecret+"\n")
	f.job = filepath.Join(f.jobDir, "job.toml")
	return f
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// jobNaming writes the job file naming one env file.
func (f envFolders) jobNaming(t *testing.T, envFile string) string {
	t.Helper()
	write(t, f.job, "model = \"m\"\nenv_file = \""+envFile+"\"\n[[env]]\nid = \"a\"\n")
	return f.job
}

func TestEnvFilesStayInTheJobsFolder(t *testing.T) {
	t.Parallel()
	f := setupEnvFolders(t)
	if err := os.Symlink(filepath.Join(f.outside, "credentials.env"), filepath.Join(f.jobDir, "escape.env")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(f.jobDir, "keys", "secrets.env"), filepath.Join(f.jobDir, "alias.env")); err != nil {
		t.Fatal(err)
	}
	// A folder link inside the job's folder that leads out of it.
	if err := os.Symlink(f.outside, filepath.Join(f.jobDir, "linked")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, envFile string
		outside       bool // refused unless allowed
	}{
		{"a file below the folder", "keys/secrets.env", false},
		{"an absolute path inside", filepath.Join(f.jobDir, "keys", "secrets.env"), false},
		{"a link that stays inside", "alias.env", false},
		{"a ../ path that comes back in", "../job/keys/secrets.env", false},
		{"a ../ path", "../home/credentials.env", true},
		{"an absolute path outside", filepath.Join(f.outside, "credentials.env"), true},
		{"a link to a file outside", "escape.env", true},
		{"a file through a folder link that leads out", "linked/credentials.env", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			job := f.jobNaming(t, c.envFile)
			b, err := ReadJobFile(job, nil)
			if c.outside {
				if !errors.Is(err, ErrEnvFileOutside) {
					t.Fatalf("got %v, want %v", err, ErrEnvFileOutside)
				}
				if !strings.Contains(err.Error(), "--allow-outside-env-file") || !strings.Contains(err.Error(), c.envFile) {
					t.Errorf("error %q should name the file and the way out", err)
				}
				if strings.Contains(err.Error(), outsideSecret) {
					t.Errorf("error shows the secret: %v", err)
				}
				// Allowed, the same file is read.
				b, err = ReadJobFileWith(job, nil, ReadOptions{AllowOutsideEnvFile: true})
				if err != nil || len(b.SecretNames) != 1 || b.SecretNames[0] != "OUTSIDE_KEY" || !strings.Contains(string(b.Data), outsideSecret) {
					t.Fatalf("with --allow-outside-env-file: %+v, %v", b, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused a file inside the folder: %v", err)
			}
			if len(b.SecretNames) != 1 || b.SecretNames[0] != "INSIDE_KEY" || !strings.Contains(string(b.Data), insideSecret) {
				t.Errorf("got secrets %v in:\n%s", b.SecretNames, b.Data)
			}
		})
	}
}

// The job file reached through a linked folder: its own folder is compared as resolved too.
func TestEnvFilesOfAJobInALinkedFolder(t *testing.T) {
	t.Parallel()
	f := setupEnvFolders(t)
	link := filepath.Join(filepath.Dir(f.jobDir), "job-link")
	if err := os.Symlink(f.jobDir, link); err != nil {
		t.Fatal(err)
	}
	f.jobNaming(t, "keys/secrets.env")
	b, err := ReadJobFile(filepath.Join(link, "job.toml"), nil)
	if err != nil || len(b.SecretNames) != 1 {
		t.Fatalf("got %+v, %v", b, err)
	}
}

func TestEnvFileParseErrorsNameTheLineNotTheContents(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, content string
		line          int
	}{
		{"a bad name", "A=sk-one-1111\nB=sk-two-2222\nC-D sk-three-3333\nE=sk-four-4444\n", 3},
		{"after a value over several lines", "A=\"sk-one\nstill-one-1111\"\nB=sk-two-2222\nbad/key=sk-three-3333\n", 4},
		{"an unterminated quote", "A=sk-one-1111\nB=\"sk-two-2222\nC=sk-three-3333\n", 2},
		{"on the first line, without a newline at the end", "{sk-one-1111}", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			write(t, filepath.Join(dir, "secrets.env"), c.content)
			write(t, filepath.Join(dir, "job.toml"), "model = \"m\"\nenv_file = \"secrets.env\"\n[[env]]\nid = \"a\"\n")
			_, err := ReadJobFile(filepath.Join(dir, "job.toml"), nil)
			if err == nil {
				t.Fatal("a broken env file was read")
			}
			msg := err.Error()
			if !strings.Contains(msg, `names env file "secrets.env"`) || !strings.Contains(msg, "line "+strconv.Itoa(c.line)+":") {
				t.Errorf("got %q, want the file and line %d", msg, c.line)
			}
			// The message names the file by its path, whose temporary folder has random digits
			// ("…3444476416/001"): what must not show is the file's contents.
			shown := strings.ReplaceAll(msg, dir, "DIR")
			for _, secret := range []string{"sk-", "1111", "2222", "3333", "4444", "still"} {
				if strings.Contains(shown, secret) {
					t.Errorf("error %q shows the file's contents (%q)", msg, secret)
				}
			}
		})
	}
}

func TestEnvFileMustBeASmallRegularFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe.env"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadEnvFile(filepath.Join(dir, "pipe.env")); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a named pipe: %v", err)
	}
	if _, err := ReadEnvFile(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a folder: %v", err)
	}
	big := filepath.Join(dir, "big.env")
	write(t, big, "A="+strings.Repeat("x", MaxEnvFileBytes)+"\n")
	if _, err := ReadEnvFile(big); err == nil || !strings.Contains(err.Error(), "over") {
		t.Errorf("a file over %d bytes: %v", MaxEnvFileBytes, err)
	}
}
