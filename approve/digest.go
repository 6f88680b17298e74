// Package approve binds human or policy-engine approvals to the exact job
// that was approved. A job's digest is SHA-256 over a canonical encoding of
// everything that decides what it does: kind, code, module, entry, argv,
// stdin, input, every file's name and content, the environment, grants (with what each
// granted host path is: its type, device and inode and, for a file of up
// to a MiB, its content), resolved limits,
// situation, lifecycle, session, the tier it runs on and the tenant that
// submits it. An approval is a token signed by the server (HMAC-SHA-256)
// over that digest, the tenant and an expiry; at execution the digest is
// recomputed over the job actually handed to the tier (and, for tiers that
// place files in a sandbox, over the placed files), so anything changed
// after approval is refused as "approval_stale".
package approve

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/hostpath"
	"github.com/airlock-sandbox/airlock/internal/jsonappend"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// Digest is the hex SHA-256 of a job's canonical encoding.
type Digest string

// canonical writes length-prefixed fields, so no two different jobs encode
// to the same bytes (a field boundary can never be forged by content).
// Fields are gathered in a buffer and hashed in large writes; a long value
// is hashed directly, so a big file is never copied into the buffer.
type canonical struct {
	h   hash.Hash
	buf []byte
}

// direct is the length from which a value bypasses the buffer.
const direct = 4096

// canonicals are reused: a digest is taken for every run.
var canonicals = sync.Pool{New: func() any {
	return &canonical{h: sha256.New(), buf: make([]byte, 0, 1024)}
}}

func newCanonical() *canonical {
	c := canonicals.Get().(*canonical)
	c.h.Reset()
	c.buf = c.buf[:0]
	return c
}

func (c *canonical) str(tag string, s string) {
	c.buf = append(c.buf, tag...)
	c.buf = binary.BigEndian.AppendUint64(c.buf, uint64(len(s)))
	if len(s) < direct {
		c.buf = append(c.buf, s...)
		return
	}
	c.flush()
	_, _ = io.WriteString(c.h, s)
}

func (c *canonical) int(tag string, v int64) {
	c.buf = append(c.buf, tag...)
	c.buf = binary.BigEndian.AppendUint64(c.buf, uint64(v))
}

func (c *canonical) strs(tag string, list []string) {
	c.int(tag, int64(len(list)))
	for _, s := range list {
		c.str("", s)
	}
}

func (c *canonical) flush() {
	c.h.Write(c.buf)
	c.buf = c.buf[:0]
}

// sum flushes the buffer and returns the hex digest.
func (c *canonical) sum() Digest {
	c.flush()
	var d [sha256.Size]byte
	sum := Digest(hex.EncodeToString(c.h.Sum(d[:0])))
	if cap(c.buf) <= 64<<10 {
		canonicals.Put(c)
	}
	return sum
}

// Of returns the digest of job as it runs on tier for tenant. Files are
// read from the job itself; see [Placed] for files read back from a
// sandbox. Callers must resolve the limits first (the same job with other
// limits is another job).
func Of(job *airlock.Job, tier, tenant string) Digest {
	return digest(job, tier, tenant, job.Files)
}

// Pinned binds d, a job's digest, to the content of the image the job
// names: imageDigest is the digest its image reference points at when the
// job is checked. A catalogue name moved to another image after the
// approval then gives another digest, as a file edited after it does. An
// empty imageDigest (no image store, the host view, a reference not pulled
// yet) leaves d as it is: the job is bound to the reference's text.
func Pinned(d Digest, imageDigest string) Digest {
	if imageDigest == "" {
		return d
	}
	c := newCanonical()
	c.str("airlock-job-image-v1", "")
	c.str("job", string(d))
	c.str("image", imageDigest)
	return c.sum()
}

func digest(job *airlock.Job, tier, tenant string, files map[string]string) Digest {
	c := newCanonical()
	c.str("airlock-job-v1", "")
	c.str("tenant", tenant)
	c.str("tier", tier)
	c.str("kind", string(job.Kind))
	c.str("code", job.Code)
	c.str("module", string(job.Module))
	c.str("entry", job.Entry)
	c.strs("argv", job.Argv)
	c.str("stdin", job.Stdin)
	// encoding/json sorts map keys, and DecodeJob normalises numbers, so
	// equal inputs encode equally; a whole float keeps its ".0", as the
	// program sees a float, not an integer.
	in, err := jsonappend.Typed(make([]byte, 0, 256), job.Input, true)
	if err != nil {
		in = nil
	}
	c.str("input", string(in))
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	c.int("files", int64(len(names)))
	for _, n := range names {
		c.str("name", n)
		c.str("content", files[n])
	}
	if len(job.Collect) > 0 {
		// What leaves the sandbox is part of the job. Present only when
		// set, as env below.
		c.strs("collect", job.Collect)
	}
	if len(job.Env) > 0 {
		// Present only when set, so the digests of jobs without an
		// environment are unchanged (the tag is distinct and values are
		// length-prefixed, so the encoding stays unambiguous).
		c.int("env", int64(len(job.Env)))
		for _, n := range value.SortedKeys(job.Env) {
			c.str("name", n)
			c.str("value", job.Env[n])
		}
	}
	if job.Image != "" {
		// Present only when named, as env above.
		c.str("image", job.Image)
	}
	g := &job.Grants
	c.strs("fs.read", g.FS.Read)
	if len(g.FS.Read) > 0 {
		// What each path is now, not just its name: a path swapped for a
		// link, or a small file edited, after the approval is another job.
		// Present only with read grants, so other digests are unchanged.
		ids := make([]string, len(g.FS.Read))
		for i, p := range g.FS.Read {
			id, err := hostpath.Identity(p)
			if err != nil {
				id = "unresolvable: " + err.Error()
			}
			ids[i] = id
		}
		c.strs("fs.read.identity", ids)
	}
	if len(g.FS.At) > 0 || len(g.FS.Copy) > 0 {
		// Where a grant appears and whether it is writable change what the
		// program can do; present only when used, so other digests are
		// unchanged.
		at := make([]string, 0, 2*len(g.FS.At))
		for _, h := range slices.Sorted(maps.Keys(g.FS.At)) {
			at = append(at, h, g.FS.At[h])
		}
		c.strs("fs.at", at)
		c.strs("fs.copy", g.FS.Copy)
	}
	c.int("fs.scratch_mb", g.FS.ScratchMB)
	c.int("net", int64(len(g.Net)))
	for _, r := range g.Net {
		c.str("host", strings.ToLower(r.Host))
		c.strs("methods", r.Methods)
		c.int("ports", int64(len(r.Ports)))
		for _, p := range r.Ports {
			c.int("", int64(p))
		}
		// Added after the first encoding: present only when set, so the
		// digests of rules without them are unchanged (tags are distinct,
		// values length-prefixed, so the encoding stays unambiguous).
		if r.Scheme != "" {
			c.str("scheme", r.Scheme)
		}
		if len(r.Paths) > 0 {
			c.strs("paths", r.Paths)
		}
	}
	c.int("spawn", b2i(g.Spawn))
	secrets := make([]string, 0, len(g.Secrets))
	for n := range g.Secrets {
		secrets = append(secrets, n)
	}
	slices.Sort(secrets)
	c.int("secrets", int64(len(secrets)))
	for _, n := range secrets {
		// The value is hashed with the name: a swapped credential is a
		// different job. The digest is one-way, so it does not leak it.
		c.str("name", n)
		c.str("value", g.Secrets[n])
	}
	// Added after the first encoding, present only when set (see scheme).
	// A reference, not a value: the executor resolves it.
	if len(g.Credentials) > 0 {
		c.int("credentials", int64(len(g.Credentials)))
		for _, cr := range g.Credentials {
			c.str("env", cr.Env)
			c.str("ref", cr.Ref)
		}
	}
	l := job.Limits
	for _, v := range []int64{l.WallMS, l.CPUMS, l.MemoryMB, l.OutputBytes, l.Pids, l.Files, l.Steps} {
		c.int("limit", v)
	}
	c.str("situation", string(job.Situation))
	c.str("lifecycle", string(job.Lifecycle))
	c.str("session", job.Session)
	// Added later, present only when set: a job's digest is unchanged
	// until it names an account, and one approved for an account does
	// not hold for another.
	if job.Account != "" {
		c.str("account", job.Account)
	}
	// The pinned clock and seed decide what time.now() and random give the
	// program, so what it does; present only when set, as above.
	if !job.Clock.IsZero() {
		// With its offset: the program reads the clock in it (its hour,
		// its text). A UTC clock is written as before ("Z").
		c.str("clock", job.Clock.Format(time.RFC3339Nano))
	}
	if job.Seed != 0 {
		c.str("seed", strconv.FormatUint(job.Seed, 10))
	}
	return c.sum()
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
