// Package nolink opens files that someone else's code could have written, such as what a
// job's pipeline leaves in its folder, refusing any path with a symbolic link in it: the GPU
// agent reads them as root, and a link would let the job read the node's files through the
// agent (its token, another job's checkpoints) into its own logs or checkpoints.
package nolink

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Open opens path for reading; it fails (ELOOP) if any part of the path is a symbolic link,
// and refuses anything but a regular file: a named pipe would block the reader for good
// (opening one waits for a writer), a device could be anything. The path must be absolute
// and free of links above the job's folder: the agent resolves its work folder once at start.
func Open(path string) (*os.File, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK | unix.O_NOCTTY,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: path, Err: ErrNotRegular}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// ErrNotRegular is a path that is not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// ReadFile is os.ReadFile through Open.
func ReadFile(path string) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
