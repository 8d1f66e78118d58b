package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A sandboxed job's folder is a file system of its own: an ext4 image the size of the job's
// share of the node's work disk, sparse (it takes on disk what the job writes), made and
// loop-mounted at the job's folder when the job is admitted, and removed when it ends. What the
// job writes — outputs, checkpoints, home, temporary files, its environments' installs, and its
// logs, which the agent writes there for it — cannot fill the node's disk or another job's: past
// its size the job's writes fail with "No space left on device", and only its own. (The node's
// kernel may have no disk quotas at all: this project's CI machine's is built without them.)
//
// The job's Python environment is an overlay on the job's file system: the node's prime-rl
// .venv below, read-only, and the job's changes above it, in its own space. Nothing is copied or
// linked for it.

// Disk is a job's file system and the mounts on it.
type Disk struct {
	dir    string   // the job's folder: the mount point
	image  string   // the image file
	mounts []string // mounted on dir's file system, in mount order (overlays)
}

// diskShare is the share of the work disk the jobs' file systems may take in all (the node's
// caches and the agent keep the rest).
const diskShare = 0.9

// minDisk is the smallest file system a job gets.
const minDisk = 256 << 20

// diskSize is the size of a job's file system with gpus GPUs: its share of the work disk, or
// the operator's DiskQuota.
func (s *Sandbox) diskSize(gpus int) (int64, error) {
	if s.cfg.DiskQuota > 0 {
		return s.cfg.DiskQuota, nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(s.workDir, &st); err != nil {
		return 0, fmt.Errorf("read the work disk's size: %w", err)
	}
	total := float64(st.Blocks) * float64(st.Bsize) * diskShare
	return max(minDisk, int64(total*s.Limits(gpus).CPUShare)), nil
}

// OpenDisk makes dir, a job's folder in the agent's work folder, a file system of its own for a
// job with gpus GPUs (see above). Whatever was at dir before goes. It returns nil, and leaves
// dir alone, where jobs get none (a negative DiskQuota).
func (s *Sandbox) OpenDisk(dir string, gpus int) (*Disk, error) {
	if s.cfg.DiskQuota < 0 {
		return nil, nil
	}
	size, err := s.diskSize(gpus)
	if err != nil {
		return nil, err
	}
	images := filepath.Join(s.workDir, "disks")
	if err := os.MkdirAll(images, 0o700); err != nil {
		return nil, err
	}
	d := &Disk{dir: dir, image: filepath.Join(images, filepath.Base(dir)+".img")}
	unmountUnder(dir)
	_ = os.RemoveAll(dir)
	_ = os.Remove(d.image)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(d.image, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	err = f.Truncate(size)
	f.Close()
	if err == nil {
		// No journal and lazy initialization: made in tens of milliseconds whatever the size;
		// no blocks kept for root, so the agent's writes for the job (its logs) count too.
		err = run("mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", "nodiscard,lazy_itable_init=1", "-L", "hostedtrain-job", d.image)
	}
	if err == nil {
		err = run("mount", "-t", "ext4", "-o", "loop,nosuid,nodev", d.image, dir)
	}
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("the job's disk of %d MiB: %w", size>>20, err)
	}
	_ = os.Remove(filepath.Join(dir, "lost+found"))
	if err := os.Chmod(dir, 0o755); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// Overlay mounts at merged the trees lower (read-only, the node's; the first on top) with the
// job's changes kept on the job's disk.
func (d *Disk) Overlay(merged string, lower ...string) error {
	name := filepath.Base(merged)
	upper, work := d.Upper(merged), filepath.Join(d.dir, "."+name+"-work")
	for _, p := range []string{upper, work, merged} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
	}
	opts := "lowerdir=" + strings.Join(lower, ":") + ",upperdir=" + upper + ",workdir=" + work
	if err := run("mount", "-t", "overlay", "overlay", "-o", opts, merged); err != nil {
		return fmt.Errorf("overlay %s on the job's disk: %w", lower, err)
	}
	d.mounts = append(d.mounts, merged)
	return nil
}

// Upper is where an overlay mounted at merged keeps the job's changes.
func (d *Disk) Upper(merged string) string {
	return filepath.Join(d.dir, "."+filepath.Base(merged)+"-upper")
}

// Space is how many bytes the job's file system has left for it to write, and its size.
func (d *Disk) Space() (avail, size int64) {
	var st unix.Statfs_t
	if unix.Statfs(d.dir, &st) != nil {
		return 0, 0
	}
	return int64(st.Bavail) * st.Bsize, int64(st.Blocks) * st.Bsize
}

// Full reports whether the job's file system has (nearly) no room left: less than 1 MiB, or
// half a percent of it.
func (d *Disk) Full() bool {
	avail, size := d.Space()
	return size > 0 && (avail < 1<<20 || avail < size/200)
}

// Close unmounts the job's file system and removes its image. The job's processes must have
// ended; one still holding a file is detached from (lazily unmounted), never left mounted.
func (d *Disk) Close() {
	for i := len(d.mounts) - 1; i >= 0; i-- {
		unmount(d.mounts[i])
	}
	d.mounts = nil
	unmount(d.dir)
	_ = os.Remove(d.image)
}

// unmount unmounts path, lazily if it is busy; a path that is no mount point is left alone.
func unmount(path string) {
	for i := 0; i < 50; i++ {
		err := unix.Unmount(path, 0)
		if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = unix.Unmount(path, unix.MNT_DETACH)
}

// unmountUnder unmounts every mount at or under dir, the deepest first: what an agent that died
// left of a job's file system.
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 {
			p := unescapeMount(fields[4])
			if p == dir || strings.HasPrefix(p, dir+"/") {
				points = append(points, p)
			}
		}
	}
	f.Close()
	for i := len(points) - 1; i >= 0; i-- {
		unmount(points[i])
	}
}

// unescapeMount reads a mountinfo path, where space, tab, newline and backslash are octal.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cleanDisks removes what an agent that died left of its jobs' file systems: their mounts under
// the work folder's jobs/ and their images.
func cleanDisks(workDir string) {
	unmountUnder(filepath.Join(workDir, "jobs"))
	images, _ := filepath.Glob(filepath.Join(workDir, "disks", "*.img"))
	for _, img := range images {
		_ = os.Remove(img)
	}
}

// run runs a system command to its end; its output is the error's.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("%s is missing (Debian's e2fsprogs and util-linux have it): %w", name, err)
		}
		return fmt.Errorf("%s: %v: %s", name, err, msg)
	}
	return nil
}
