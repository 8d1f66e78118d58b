package jobspec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/joho/godotenv"
)

// MaxEnvFileBytes bounds an env file: it holds a few keys, and the job that carries them is
// bounded by the API's 1 MiB body limit anyway.
const MaxEnvFileBytes = 1 << 20

// ErrEnvFileOutside is returned for an env file that lies outside the job file's folder, by
// its path or through a symbolic link, when that is not allowed.
var ErrEnvFileOutside = errors.New("outside the job file's folder")

// envFilePath resolves an env file a job names: relative to the job file's folder, every
// symbolic link followed. Unless allowOutside, the file must lie in that folder or below it,
// before and after the links are followed, so that a job file from someone else cannot make
// the CLI send ~/.aws/credentials, or what a link in the folder points at, as the job's secrets.
func envFilePath(jobPath, name string, allowOutside bool) (string, error) {
	dir, err := filepath.Abs(filepath.Dir(jobPath))
	if err != nil {
		return "", err
	}
	p := name
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, name)
	}
	if !allowOutside && !within(dir, p) {
		return "", fmt.Errorf("%w %s (--allow-outside-env-file reads it anyway)", ErrEnvFileOutside, dir)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	if allowOutside {
		return real, nil
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	if !within(realDir, real) {
		return "", fmt.Errorf("a symbolic link leads to %s, %w %s (--allow-outside-env-file reads it anyway)", real, ErrEnvFileOutside, dir)
	}
	return real, nil
}

// within reports whether path is dir or lies below it; both are absolute and clean.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// ReadEnvFile reads a dotenv file (KEY=VALUE lines, as godotenv reads them). Its values are
// secrets, so no error quotes the file: one that does not parse is named with the number of
// the line where it stops parsing, and nothing of the line itself.
func ReadEnvFile(path string) (map[string]string, error) {
	// Non-blocking: opening a named pipe would otherwise wait for a writer.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxEnvFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxEnvFileBytes {
		return nil, fmt.Errorf("%s is over %d bytes: an env file holds a few KEY=VALUE lines", path, MaxEnvFileBytes)
	}
	vals, err := godotenv.UnmarshalBytes(data)
	if err != nil {
		// godotenv's error quotes the file from the bad line on: it is not passed on.
		return nil, fmt.Errorf("%s, line %d: not a KEY=VALUE line (the file holds secrets, so it is not shown)", path, badLine(data))
	}
	return vals, nil
}

// badLine is the line a dotenv file stops parsing at, found without godotenv's error (which
// quotes the file): one past the longest run of whole lines from the top that parses. A
// quoted value may run over several lines, so a shorter run that fails does not settle it.
func badLine(data []byte) int {
	lines := bytes.SplitAfter(data, []byte("\n"))
	for k := len(lines) - 1; k > 0; k-- {
		if _, err := godotenv.UnmarshalBytes(bytes.Join(lines[:k], nil)); err == nil {
			return k + 1
		}
	}
	return 1
}
