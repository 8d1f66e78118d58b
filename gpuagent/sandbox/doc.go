// Package sandbox is what a tenant's code on a GPU node can reach and take: the box every
// process of a job runs in (environment installs, the preflight, the pipeline, the inference
// server). A Box is bubblewrap (bwrap) as the job slot's own unprivileged user, with a clean
// environment, namespaces of its own, the node's system folders read-only, only the job's own
// GPUs' device files and a seccomp filter (sandbox.go, seccomp.go); a network namespace with only
// a loopback (netns_linux.go), whose one way out is an egress proxy that refuses the node's own
// and private addresses (egress.go); a control group with the job's share of the node's memory,
// CPU and tasks (cgroup.go); and a Disk, a file system of its own cut from the work disk
// (disk.go). Open readies an agent's sandbox on its node and ends what a killed agent of the
// same work folder left (Reclaim); Flags are its command-line flags. Its tests run the real
// bubblewrap, cgroups and mounts, as root, as the agent does.
//
// It owns the box and the limits that bound it. It may import small leaf packages of the module
// (internal/webhook, whose guard the egress proxy dials through; in its tests internal/mountns
// and internal/testwait); it must not import the agent (gpuagent), the rendering
// (gpuagent/render), the queue, the API or its client: the agent calls it, never the other way
// round.
package sandbox
