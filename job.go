package airlock

import (
	"time"
)

// Kind says what a job's payload is.
type Kind string

// The job kinds.
const (
	KindExpr     Kind = "expr"     // an expression (Job.Code)
	KindStarlark Kind = "starlark" // a Starlark script (Job.Code)
	KindWasm     Kind = "wasm"     // a WebAssembly module (Job.Module)
	KindCommand  Kind = "command"  // a program and its arguments (Job.Argv)
)

// Situation says who wrote a job's code and what the code holds. The router
// turns it into a minimum isolation level.
type Situation string

// The situations, from least to most demanding.
const (
	SituationExpression  Situation = "expression"   // a simple expression
	SituationInternal    Situation = "internal"     // internal developer tooling
	SituationPublic      Situation = "public"       // model-generated code from public users (the default)
	SituationMultiTenant Situation = "multi-tenant" // shared execution for many tenants
	SituationCredentials Situation = "credentials"  // code that holds production credentials
)

// Lifecycle says how long the instance that runs a job lives.
type Lifecycle string

// The lifecycles.
const (
	LifecycleEphemeral  Lifecycle = "ephemeral"  // a fresh instance per job (the default)
	LifecycleSession    Lifecycle = "session"    // one instance for a conversation
	LifecyclePersistent Lifecycle = "persistent" // a named workspace that accumulates state
)

// Job is what to run and what it may touch. The zero value of every grant
// withholds it. Job is plain data: its JSON form is the v1 wire format.
type Job struct {
	Kind   Kind           `json:"kind"`
	Code   string         `json:"code,omitempty"`
	Module []byte         `json:"module,omitempty"` // base64 in JSON
	Entry  string         `json:"entry,omitempty"`
	Argv   []string       `json:"argv,omitempty"`
	Stdin  string         `json:"stdin,omitempty"`
	Input  map[string]any `json:"input,omitempty"`
	// Files are placed in the scratch directory, path to content. Content
	// is any bytes: on the wire, valid UTF-8 is a JSON string and anything
	// else {"base64": "..."}.
	Files map[string]string `json:"files,omitempty"`
	// Collect names the files a command or wasm job returns from its
	// scratch directory once the program has ended: relative paths or
	// path.Match patterns ("out/*.png"). Only regular files come back,
	// never through a symbolic link, in Result.Files, up to 16 MiB in all
	// (a file past that is left out and named in Result.FilesSkipped).
	Collect []string `json:"collect,omitempty"`
	// Env is the program's plain variables, name to value, for wasm and
	// command jobs (a command's replace the image's and the baseline's). It is
	// part of the job like argv (recorded, replayed, approved) and grants
	// nothing: credentials belong in Grants.Secrets.
	Env map[string]string `json:"env,omitempty"`
	// Image is the environment a command job runs in: a name from the
	// operator's catalogue ("python", "minimal"), an OCI reference pinned by
	// digest, or empty for the operator's default (see package image).
	Image     string    `json:"image,omitempty"`
	Grants    Grants    `json:"grants,omitzero"`
	Limits    Limits    `json:"limits,omitzero"`
	Clock     time.Time `json:"clock,omitzero"`
	Seed      uint64    `json:"seed,omitempty"`
	Situation Situation `json:"situation,omitempty"`
	Lifecycle Lifecycle `json:"lifecycle,omitempty"`
	Session   string    `json:"session,omitempty"`
	Tier      string    `json:"tier,omitempty"`
	// Account names the account a level-5 job runs under (see the
	// account tier): one the caller's configuration lets it use. Empty:
	// the caller's default account. Tiers below level 5 refuse a job
	// that names one.
	Account string `json:"account,omitempty"`
}

// Grants are the capabilities a job may use. Each class is withheld unless
// granted; nothing is inherited from the host.
type Grants struct {
	FS      FSGrant           `json:"fs,omitzero"`
	Net     []NetRule         `json:"net,omitempty"`
	Spawn   bool              `json:"spawn,omitempty"`
	Secrets map[string]string `json:"secrets,omitempty"`
	// Credentials name credentials the job's program gets in its
	// environment, by reference: the value is resolved, under another
	// account, by the executor that holds it (level 5, the account tier),
	// and never passes through the caller. Only that tier admits them.
	Credentials []Credential `json:"credentials,omitempty"`
}

// Credential places the credential named Ref in the program's environment
// variable Env.
type Credential struct {
	Env string `json:"env"`
	Ref string `json:"ref"`
}

// FSGrant grants filesystem access: host paths to read, and the size of a
// writable scratch directory (0: the tier's default, if it has a scratch).
//
// At places a read grant at a guest path (host path → absolute guest
// path; without an entry a grant appears at its own host path). Copy lists
// read grants given as a writable copy made at job start: changes stay in
// the sandbox and vanish with it, and the copy counts against ScratchMB.
// Every key of At and every entry of Copy must also be in Read, so every
// check of host paths sees them all.
type FSGrant struct {
	Read      []string          `json:"read,omitempty"`
	At        map[string]string `json:"at,omitempty"`
	Copy      []string          `json:"copy,omitempty"`
	ScratchMB int64             `json:"scratch_mb,omitempty"`
}

// GuestPath is where the read grant host appears inside the sandbox.
func (g FSGrant) GuestPath(host string) string {
	if p, ok := g.At[host]; ok {
		return p
	}
	return host
}

// NetRule allows egress to one host with the listed HTTP methods (empty:
// GET and HEAD) on the listed ports, over the named scheme, to the listed
// paths.
//
// Scheme is "http", "https" or empty (both). Ports default to the
// scheme's own port (80 for http, 443 for https; both for an empty
// scheme). Paths, when present, are the only request paths allowed: an
// entry is an exact path ("/info/refs"), a prefix ending in "*"
// ("/org/repo/*"), or a suffix starting with "*" ("*/git-upload-pack").
// Paths are matched on the request's decoded path without its query (the
// query is never matched); a request to such a rule whose path could be
// read as another (an encoded slash or backslash, a "." or ".." segment
// in any encoding, an empty segment, a ';', a '%' left after decoding) is
// refused.
type NetRule struct {
	Host    string   `json:"host"`
	Methods []string `json:"methods,omitempty"`
	Ports   []int    `json:"ports,omitempty"`
	Scheme  string   `json:"scheme,omitempty"`
	Paths   []string `json:"paths,omitempty"`
}

// Limits bound a run. A zero field takes the tier's default; a field above
// the operator's maximum makes the job invalid.
type Limits struct {
	WallMS      int64 `json:"wall_ms,omitempty"`
	CPUMS       int64 `json:"cpu_ms,omitempty"`
	MemoryMB    int64 `json:"memory_mb,omitempty"`
	OutputBytes int64 `json:"output_bytes,omitempty"`
	Pids        int64 `json:"pids,omitempty"`
	Files       int64 `json:"files,omitempty"`
	Steps       int64 `json:"steps,omitempty"`
}

// Wall returns the wall-clock limit as a duration.
func (l Limits) Wall() time.Duration { return time.Duration(l.WallMS) * time.Millisecond }

// CPU returns the CPU-time limit as a duration.
func (l Limits) CPU() time.Duration { return time.Duration(l.CPUMS) * time.Millisecond }

// Hermetic reports whether the job is granted nothing: no filesystem, no
// network, no process spawn and no credentials.
func (g *Grants) Hermetic() bool {
	return len(g.FS.Read) == 0 && len(g.FS.At) == 0 && len(g.FS.Copy) == 0 && g.FS.ScratchMB == 0 && len(g.Net) == 0 && !g.Spawn && len(g.Secrets) == 0 && len(g.Credentials) == 0
}

// Language reports whether the kind runs inside an interpreter or runtime
// (expr, Starlark, WebAssembly) rather than as an operating-system process.
func (k Kind) Language() bool {
	return k == KindExpr || k == KindStarlark || k == KindWasm
}
