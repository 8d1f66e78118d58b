// Package nolink opens files that someone else's code could have written, such as what a
// job's pipeline leaves in its folder, refusing any path with a symbolic link in it: the GPU
// agent reads them as root, and a link would let the job read the node's files through the
// agent (its token, another job's checkpoints) into its own logs or checkpoints.
package nolink

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Open opens path for reading; it fails (ELOOP) if any part of the path is a symbolic link.
// The path must be absolute and free of links above the job's folder: the agent resolves its
// work folder once at start.
func Open(path string) (*os.File, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// ReadFile is os.ReadFile through Open.
func ReadFile(path string) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
