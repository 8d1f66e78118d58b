package sandbox

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/net/bpf"
)

// The seccomp filter every job process runs under (bwrap --seccomp), on top of what the
// sandbox's namespaces and the slot's unprivileged user already deny. It refuses, with EPERM:
//
//   - new user namespaces (clone and unshare with CLONE_NEWUSER; clone3, whose flags a
//     filter cannot read, answers ENOSYS and the C library falls back to clone): inside one a
//     job holds every capability, and a large part of the node's kernel is open to it;
//   - the kernel keyrings (keyctl, add_key, request_key): they belong to the user id, which
//     the next job of the same slot has too — a channel between tenants;
//   - bpf, perf_event_open and userfaultfd: kernel surfaces no training job needs;
//   - io_uring (io_uring_setup, io_uring_enter, io_uring_register), with ENOSYS so that a
//     runtime that tries it falls back to ordinary calls: a large, often-patched kernel
//     surface whose work is done by kernel threads outside the job's accounting;
//   - on x86-64, the x32 system call numbers, which would get around the rest.
//
// Everything else is allowed: CUDA, NCCL, vLLM and PyTorch need the rest of the kernel.

const (
	seccompRetAllow = 0x7fff0000
	seccompRetErrno = 0x00050000
	cloneNewUser    = 0x10000000
	x32SyscallBit   = 0x40000000
	eperm, enosys   = 1, 38
)

// seccompArch is one architecture's audit id and system call numbers.
type seccompArch struct {
	audit                                                   uint32
	keyctl, addKey, requestKey, bpf, userfaultfd, perfEvent int
	clone, clone3, unshare                                  int
	ioUring                                                 [3]int // setup, enter, register
	x32                                                     bool
}

var seccompArches = map[string]seccompArch{
	"amd64": {audit: 0xc000003e, keyctl: 250, addKey: 248, requestKey: 249, bpf: 321, userfaultfd: 323, perfEvent: 298,
		clone: 56, clone3: 435, unshare: 272, ioUring: [3]int{425, 426, 427}, x32: true},
	"arm64": {audit: 0xc00000b7, keyctl: 219, addKey: 217, requestKey: 218, bpf: 280, userfaultfd: 282, perfEvent: 241,
		clone: 220, clone3: 435, unshare: 97, ioUring: [3]int{425, 426, 427}},
}

// seccompFilter is the filter for goarch as bwrap reads it: struct sock_filter entries, in the
// machine's byte order (both architectures are little-endian).
func seccompFilter(goarch string) ([]byte, error) {
	a, ok := seccompArches[goarch]
	if !ok {
		return nil, fmt.Errorf("no seccomp filter for %s", goarch)
	}
	errno := func(e uint32) bpf.Instruction { return bpf.RetConstant{Val: seccompRetErrno | e} }
	allow := bpf.RetConstant{Val: seccompRetAllow}
	// Laid out as: checks that jump to fixed labels at the end.
	denied := []int{a.keyctl, a.addKey, a.requestKey, a.bpf, a.userfaultfd, a.perfEvent}
	var prog []bpf.Instruction
	// Labels, counted from the end: [.. checkFlags(4) | allow | eperm | enosys].
	prog = append(prog,
		bpf.LoadAbsolute{Off: 4, Size: 4},                          // arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: a.audit, SkipTrue: 1}, // ours: go on
		bpf.RetConstant{Val: seccompRetErrno | eperm},              // another architecture's calls: refused
		bpf.LoadAbsolute{Off: 0, Size: 4},                          // nr
	)
	if a.x32 {
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32SyscallBit, SkipTrue: 0xff}) // patched below
	}
	for _, nr := range denied {
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipTrue: 0xff})
	}
	for _, nr := range a.ioUring {
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipTrue: 0xfe})
	}
	prog = append(prog,
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(a.clone3), SkipTrue: 0xfe},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(a.clone), SkipTrue: 0xfd},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(a.unshare), SkipTrue: 0xfd},
		allow,
	)
	checkFlags := len(prog)
	prog = append(prog,
		bpf.LoadAbsolute{Off: 16, Size: 4}, // args[0], low half: the flags
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: cloneNewUser, SkipTrue: 1},
		allow,
	)
	epermAt := len(prog)
	prog = append(prog, errno(eperm))
	enosysAt := len(prog)
	prog = append(prog, errno(enosys))
	// Point the placeholder jumps at their labels.
	for i, ins := range prog {
		j, ok := ins.(bpf.JumpIf)
		if !ok {
			continue
		}
		var to int
		switch j.SkipTrue {
		case 0xff:
			to = epermAt
		case 0xfe:
			to = enosysAt
		case 0xfd:
			to = checkFlags
		default:
			continue
		}
		j.SkipTrue = uint8(to - i - 1)
		prog[i] = j
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		out = binary.LittleEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.LittleEndian.AppendUint32(out, r.K)
	}
	return out, nil
}

// seccompFile is a pipe holding the filter for this machine, for bwrap --seccomp to read.
func seccompFile() (*os.File, error) {
	prog, err := seccompFilter(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	_, err = w.Write(prog) // a few hundred bytes: within the pipe's buffer
	w.Close()
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}
