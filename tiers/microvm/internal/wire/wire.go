// Package wire holds the messages between the microvm tier's host side and
// the agent that is the guest's /init, each the JSON payload of one frame
// of package frame: Job (host to guest), Ready, Files and Exit (guest to
// host).
// Output travels as Stdout and Stderr frames, a failure as a Fail frame.
package wire

import "time"

// Job is what the host hands the agent.
type Job struct {
	Argv []string          `json:"argv"`
	Env  map[string]string `json:"env,omitempty"` // the job's whole environment: its granted secrets
	// Files and Stdin are bytes (base64 in JSON), so content that is not
	// UTF-8 reaches the guest unchanged.
	Files map[string][]byte `json:"files,omitempty"`
	Stdin []byte            `json:"stdin,omitempty"`
	// Clock is the wall-clock instant the guest is set to before the job starts.
	Clock time.Time `json:"clock"`
	// Entropy is fresh host randomness mixed into the guest's pool (and the
	// guest CRNG reseeded) before the job starts: a restored snapshot or a
	// pooled VM never replays another run's random numbers.
	Entropy []byte `json:"entropy"`
	// Limits applied inside the guest.
	MemoryMB  int64 `json:"memory_mb"`
	CPUMS     int64 `json:"cpu_ms"`
	Pids      int64 `json:"pids"`
	OpenFiles int64 `json:"open_files"`
	ScratchMB int64 `json:"scratch_mb"`
	Spawn     bool  `json:"spawn"`
	// Net, when set, configures the guest's one network interface for a
	// job granted egress (the VM was booted with it).
	Net *Net `json:"net,omitempty"`
	// Collect are the job's collect patterns: once the job has ended, the
	// agent sends what they name from the scratch in a Files frame
	// (collect.Wire), before Exit.
	Collect []string `json:"collect,omitempty"`
	// Read are the job's read grants: each a read-only disk the VM was
	// booted with, to be shown at the granted path in the job's root.
	Read []Read `json:"read,omitempty"`
}

// Read is one read grant as the guest shows it: the disk whose virtio
// serial is Serial holds a snapshot of the granted host path, which the
// agent mounts read-only at Path in the job's root (the grant's guest
// path: its host path unless grants.fs.at moves it). A directory's disk
// holds the directory; a file's (File set) holds only that file, under
// Path's base name, which is bound onto Path.
//
// With Copy set the grant is a writable copy: the agent lays an overlay
// on the disk whose upper layer is a tmpfs of ScratchMB (the disk's files
// are owned by JobUID), so the job's changes stay in guest memory and
// vanish with the VM; the disk is read-only to the VMM.
type Read struct {
	Path   string `json:"path"`
	Serial string `json:"serial"`
	File   bool   `json:"file,omitempty"`
	Copy   bool   `json:"copy,omitempty"`
}

// JobUID is the unprivileged user (and group) the guest runs jobs as; a
// copy grant's disk is built with its files owned by it.
const JobUID = 65534

// Net is the guest side of the egress wiring: the interface's address (no
// default route: only the subnet, on which QEMU's restricted user network
// answers nothing but the guestfwd to the egress proxy) and the gateway's
// CA certificate, written to CAPath before the root turns read-only.
type Net struct {
	Addr   string `json:"addr"` // CIDR, e.g. 10.0.2.15/24
	CA     []byte `json:"ca"`
	CAPath string `json:"ca_path"`
}

// Ready is the agent's report that it waits for its job: its protocol
// version, and how long the guest took to reach each step of its start-up
// (informational, for the host's measurements).
type Ready struct {
	// Version is the agent's protocol version; the host refuses any other
	// (an agent built from older sources would misread the Job frame).
	Version int    `json:"version"`
	Marks   []Mark `json:"marks,omitempty"`
	// Root is RootImage when the agent mounted the image disk the host
	// named as the job's root; empty when the job runs in the initramfs.
	// A host that booted a guest with an image refuses a Ready without it
	// (an agent that predates image roots would run the job elsewhere).
	Root string `json:"root,omitempty"`
	// Reads is set by an agent that mounts Job.Read. A host that booted a
	// guest with read-grant disks refuses a Ready without it (an older
	// agent would run the job without its grants).
	Reads bool `json:"reads,omitempty"`
	// Copies is set by an agent that mounts a Read with Copy writable. A
	// host that boots a guest with a copy grant refuses a Ready without
	// it (an older agent would show the copy read-only).
	Copies bool `json:"copies,omitempty"`
}

// RootImage is Ready.Root for a guest whose job root is the image disk.
const RootImage = "image"

// RootSerial is the virtio serial of the image disk, where the VMM sets
// one (QEMU does; beside read-grant disks the agent finds it by it).
const RootSerial = "airlock-root"

// FailFilesFull begins a Fail frame's text when the job's files did not
// fit in its scratch: the job's mistake (invalid "files"), not the
// guest's failure.
const FailFilesFull = "the files do not fit in the scratch: "

// Version is this protocol's version: 2 carries files and stdin as bytes.
const Version = 2

// Mark is one step of the guest's start-up and when it ended, in
// microseconds since the guest kernel started (CLOCK_BOOTTIME).
type Mark struct {
	Step string `json:"step"`
	US   int64  `json:"us"`
}

// Exit is how the job ended.
type Exit struct {
	Code   int    `json:"code"`
	Signal string `json:"signal,omitempty"`
	// Reason, when set, is a limit that stopped the job inside the guest:
	// "memory", "cpu" or "pids".
	Reason string `json:"reason,omitempty"`
	// MemoryBytes and CPUUS are what the job's cgroup used: its peak
	// memory and its CPU time (Result.Usage, as the other tiers report it).
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	CPUUS       int64 `json:"cpu_us,omitempty"`
	// Marks are the steps of the job's run inside the guest (informational,
	// like Ready's).
	Marks []Mark `json:"marks,omitempty"`
}
