package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/internal/jsonappend"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// Record is one line of the audit trail: one run, as the server saw it.
type Record struct {
	Time    time.Time `json:"time"`
	Tenant  string    `json:"tenant"`
	Request string    `json:"request"` // run, session_run
	Session string    `json:"session,omitempty"`
	// Replica is the replica that wrote the record (see Config.ReplicaID).
	Replica  string         `json:"replica,omitempty"`
	Digest   approve.Digest `json:"digest"`
	Approval string         `json:"approval,omitempty"` // the rule that required one
	// Approver and Reason say who approved (or denied) the job and why: on
	// the decision's record, and on the runs its token allowed.
	Approver string `json:"approver,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Tier     string `json:"tier"`
	// Image is the digest of the image a command job ran in ("host": the
	// host view).
	Image    string          `json:"image,omitempty"`
	Decision []string        `json:"decision,omitempty"`
	Grants   airlock.Grants  `json:"grants,omitzero"` // secret values redacted
	Limits   airlock.Limits  `json:"limits"`
	Clock    time.Time       `json:"clock,omitzero"`
	Seed     uint64          `json:"seed,omitempty"`
	Egress   []string        `json:"egress,omitempty"`
	Outcome  string          `json:"outcome"`
	Stopped  *airlock.Stop   `json:"stopped,omitempty"`
	Error    string          `json:"error,omitempty"`
	ExitCode int             `json:"exit_code"`
	Timings  airlock.Timings `json:"timings"`
	QueueUS  int64           `json:"queue_us"`
	// Output is the SHA-256 of the run's value, stdout, stderr, exit
	// code and collected files; replay compares it.
	Output string `json:"output"`
	// Job is the job as handed to the tier, secret values redacted, kept
	// for in-process kinds and for command jobs that ran in an image, so
	// that `airlock replay` can re-run it, and on an approval's record
	// the job decided; jobs larger than MaxAuditJob are left out.
	Job *airlock.Job `json:"job,omitempty"`
}

// MaxAuditJob bounds the size of a job kept in an audit record.
const MaxAuditJob = 1 << 20

// redacted is the value that replaces every secret in the trail.
const redacted = "[redacted]"

func redactGrants(g airlock.Grants) airlock.Grants {
	if len(g.Secrets) == 0 {
		return g
	}
	s := make(map[string]string, len(g.Secrets))
	for k := range g.Secrets {
		s[k] = redacted
	}
	g.Secrets = s
	return g
}

// OutputDigest is the digest a replay compares: the value's JSON, stdout,
// stderr, the exit code and the collected files.
func OutputDigest(res *airlock.Result) string {
	h := sha256.New()
	buf := getBuf()
	defer putBuf(buf)
	v, err := jsonappend.Value((*buf)[:0], res.Value, true) // as json.Marshal
	if err != nil {
		v = nil
	}
	*buf = v
	for _, part := range [][]byte{v, []byte(res.Stdout), []byte(res.Stderr)} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(int64(res.ExitCode)))
	h.Write(n[:])
	if len(res.Files) > 0 {
		// Collected files are output too. Present only when there are
		// some, so the digests of other results are unchanged (the
		// parts are length-prefixed and the tag follows a fixed-size
		// exit code, so the encoding stays unambiguous).
		h.Write([]byte("files"))
		for _, name := range value.SortedKeys(res.Files) {
			for _, part := range []string{name, res.Files[name]} {
				binary.BigEndian.PutUint64(n[:], uint64(len(part)))
				h.Write(n[:])
				h.Write([]byte(part))
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// outcome names a result for metrics and the audit trail.
func outcome(res *airlock.Result) string {
	switch {
	case res.Stopped != nil:
		return "stopped_" + string(res.Stopped.Reason)
	case res.Error != nil:
		return "error_" + string(res.Error.Kind)
	case res.ExitCode != 0:
		return "exit_nonzero"
	}
	return "ok"
}

// auditor appends records to the trail and keeps the latest per tenant in
// memory, so a tenant can read its own (and only its own) trail.
//
// Writes are group-committed: add returns only once its line has been
// written (handed to the kernel by write(2)), so a run is answered only
// after its record is in the trail; lines that arrive while a write is in
// progress are written together by the next one, so under load one
// system call carries many records. Lines are whole and never
// interleaved: every write holds complete lines, and only one is in
// progress at a time. The writer in progress also owns the hash chain
// and the file: it links the lines as it writes them, so a write that
// fails leaves the chain where the last good write left it.
type auditor struct {
	mu     sync.Mutex
	w      io.Writer  // the trail when it is not a file (nil: none)
	file   *auditFile // the trail when it is a file
	recent map[string]*ring
	// replica names this replica in every record.
	replica string
	shipper *shipper // to the shared state, when there is one
	keep    int

	pending   []byte       // encoded records not yet written, one after another
	ends      []int        // where each record in pending ends
	cur       *commit      // the commit of the records in pending
	spare     []byte       // the buffer of the last write, for reuse
	spareEnds []int        // and its ends
	out       []byte       // the linked lines of the write in progress
	writing   bool         // a write is in progress
	writes    uint64       // writes, ever
	sync      func() error // when set, called after each write (fsync)
	wrote     *sync.Cond   // signalled after each write, on mu
	chain     chain        // the last record written; the writer's

	// err is the last write's error: runs are refused while it is set.
	// Any good write clears it, so a refusal's own record is what tells
	// that the trail can be written again.
	err error
	// since is when the failure episode in progress began: from a failed
	// write to the next good write of a run's record (a refusal's record
	// may fit where a run's does not). It is logged once at each end.
	since    time.Time
	last     error     // the last failed write's error
	failures uint64    // failed writes, ever (airlock_audit_write_errors_total)
	log      io.Writer // where episodes are reported
}

// commit is the fate of the records one write carries.
type commit struct {
	done  bool
	err   error
	runs  bool   // some record is of a run (not of a refusal)
	first uint64 // the seq of the write's first record
}

// ring keeps a tenant's latest records without copying on each add.
type ring struct {
	recs  []Record
	next  int
	total uint64 // records ever added; the latest len(recs) are kept
}

func (r *ring) add(rec Record, keep int) {
	r.total++
	if len(r.recs) < keep {
		r.recs = append(r.recs, rec)
		return
	}
	r.recs[r.next] = rec
	r.next = (r.next + 1) % keep
}

// at returns the oldest record kept whose number (counting every record
// ever added from 0) is n or more, and its number; ok is false when there
// is none.
func (r *ring) at(n uint64) (rec Record, num uint64, ok bool) {
	if r == nil || n >= r.total {
		return Record{}, 0, false
	}
	first := r.total - uint64(len(r.recs))
	n = max(n, first)
	return r.recs[(r.next+int(n-first))%len(r.recs)], n, true
}

func (r *ring) list() []Record {
	if r == nil {
		return nil
	}
	return append(append([]Record(nil), r.recs[r.next:]...), r.recs[:r.next]...)
}

func newAuditor(w io.Writer) *auditor {
	a := &auditor{w: w, recent: map[string]*ring{}, keep: 256, cur: &commit{}, log: io.Discard}
	a.wrote = sync.NewCond(&a.mu)
	return a
}

// lineBufs hold lines and answers while they are encoded, outside locks.
var lineBufs = sync.Pool{New: func() any { return new([]byte) }}

// getBuf takes a buffer of lineBufs; putBuf returns it unless a large
// result grew it (a pool must not pin megabytes of output).
func getBuf() *[]byte { return lineBufs.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) <= maxPooledBody {
		lineBufs.Put(b)
	}
}

// maxSpare bounds the write buffer kept for reuse after a burst.
const maxSpare = 1 << 20

// add records r: in memory for its tenant, and as one line in the trail,
// returning once the line is written, or with the error that kept it
// from being written.
func (a *auditor) add(r Record) error {
	_, err := a.addSeq(r)
	return err
}

// addSeq is add, also returning the record's seq in the hash chain (0
// when there is no trail or the write failed), by which the console
// finds the line again.
func (a *auditor) addSeq(r Record) (uint64, error) {
	if r.Replica == "" {
		r.Replica = a.replica
	}
	if a.shipper != nil {
		a.shipper.ship(r)
	}
	var line *[]byte
	var encErr error
	if a.w != nil || a.file != nil {
		// Encode outside the lock: only the write is serialised.
		line = getBuf()
		defer putBuf(line)
		*line, encErr = appendRecord((*line)[:0], &r)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	rg := a.recent[r.Tenant]
	if rg == nil {
		rg = &ring{}
		a.recent[r.Tenant] = rg
	}
	rg.add(r, a.keep)
	if line == nil {
		return 0, nil
	}
	if encErr != nil {
		err := fmt.Errorf("audit record: %w", encErr)
		a.failed1(err)
		return 0, err
	}
	a.pending = append(a.pending, *line...)
	a.ends = append(a.ends, len(a.pending))
	at := uint64(len(a.ends)) // this record's place in the write
	c := a.cur
	c.runs = c.runs || r.Tier != "" // refusals reach no tier
	for !c.done {
		if a.writing {
			a.wrote.Wait()
			continue
		}
		a.lead()
	}
	if c.err != nil {
		return 0, c.err
	}
	return c.first + at - 1, nil
}

// lead writes everything pending, with mu held on entry and on return.
func (a *auditor) lead() {
	// Let the runs that are ready add theirs first (as PostgreSQL's
	// commit_delay does, for the length of one yield).
	a.writing = true
	a.mu.Unlock()
	runtime.Gosched()
	a.mu.Lock()
	batch, ends, c := a.pending, a.ends, a.cur
	a.pending, a.ends, a.cur = a.spare[:0], a.spareEnds[:0], &commit{}
	a.writes++
	a.mu.Unlock()
	next := a.chain
	c.first = next.seq + 1
	out := a.out[:0]
	start := 0
	for _, end := range ends {
		out = next.link(out, batch[start:end])
		start = end
	}
	var err error
	if a.file != nil {
		err = a.file.write(out)
	} else {
		_, err = a.w.Write(out)
		if err == nil && a.sync != nil {
			err = a.sync()
		}
	}
	if cap(out) <= maxSpare {
		a.out = out
	} else {
		a.out = nil
	}
	a.mu.Lock()
	if err == nil {
		a.chain, a.err = next, nil
		if !a.since.IsZero() && c.runs {
			fmt.Fprintf(a.log, "airlock: audit: writing records again; %d failed write(s) since %s\n", a.failures, a.since.Format(time.RFC3339))
			a.since = time.Time{}
		}
	} else {
		err = fmt.Errorf("writing the audit trail: %w", err)
		a.failed1(err)
	}
	c.done, c.err = true, err
	if cap(batch) <= maxSpare {
		a.spare, a.spareEnds = batch[:0], ends[:0]
	} else {
		a.spare, a.spareEnds = nil, nil
	}
	a.writing = false
	a.wrote.Broadcast()
}

// failed1 counts a failed write, reporting it when it begins an episode
// (one line per episode, not per record); mu is held.
func (a *auditor) failed1(err error) {
	a.failures++
	if a.since.IsZero() {
		a.since = time.Now()
		fmt.Fprintf(a.log, "airlock: audit: %v (failure %d); until a write succeeds, runs are refused with 503 unless audit_fail_open\n", err, a.failures)
	}
	a.err, a.last = err, err
}

// failed returns the last write error; runs are refused while it is set.
func (a *auditor) failed() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// failing returns the error of the failure episode in progress, which
// /healthz reports: the last failed write, until a run's record is
// written again.
func (a *auditor) failing() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.since.IsZero() {
		return nil
	}
	return a.last
}

func (a *auditor) list(tenant string) []Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.recent[tenant].list()
}

// recentAt returns the tenant's oldest kept record numbered n or more (see
// ring.at), one at a time, so that a listing holds one record, not a copy
// of the tenant's list.
func (a *auditor) recentAt(tenant string, n uint64) (Record, uint64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.recent[tenant].at(n)
}

// recentEnd is the number the tenant's next record will have: a listing
// stops there, so that runs added while it is written do not prolong it.
func (a *auditor) recentEnd(tenant string) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if rg := a.recent[tenant]; rg != nil {
		return rg.total
	}
	return 0
}

// ParseRecord reads one audit line. The chain's seq and prev, which the
// writer puts before the record's own fields, are checked by
// [VerifyAudit], not here.
func ParseRecord(line []byte) (Record, error) {
	var chained struct {
		Seq  uint64 `json:"seq"`
		Prev string `json:"prev"`
		Record
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	err := dec.Decode(&chained)
	r := chained.Record
	if err != nil {
		return r, fmt.Errorf("audit record: %w", err)
	}
	if r.Job != nil && r.Job.Input != nil {
		in, err := value.Normalize(r.Job.Input)
		if err != nil {
			return r, fmt.Errorf("audit record: input: %w", err)
		}
		r.Job.Input = in.(map[string]any)
	}
	return r, nil
}

// imageDigest reports whether ref is an image's digest rather than the
// host view or nothing.
func imageDigest(ref string) bool { return strings.HasPrefix(ref, "sha256:") }

// ErrNotReplayable is returned for records whose job cannot be re-run.
var ErrNotReplayable = errors.New("record is not replayable")

// Replay re-runs a record's job on the tier that ran it, with the recorded
// clock and seed, and reports whether the output digest matches.
func Replay(ctx context.Context, r Record, tiers []airlock.Tier) (airlock.Result, bool, error) {
	switch {
	case r.Request == "approval":
		return airlock.Result{}, false, fmt.Errorf("%w: it is an approver's decision, not a run", ErrNotReplayable)
	case r.Job == nil:
		return airlock.Result{}, false, fmt.Errorf("%w: it holds no job (only in-process jobs up to %d bytes are kept)", ErrNotReplayable, MaxAuditJob)
	case !r.Job.Kind.Language() && !imageDigest(r.Image):
		return airlock.Result{}, false, fmt.Errorf("%w: a %s job that ran in the host view depends on the host; it replays only when it ran in an image", ErrNotReplayable, r.Job.Kind)
	case len(r.Job.Grants.Secrets) > 0:
		return airlock.Result{}, false, fmt.Errorf("%w: the job held credentials, which the audit trail does not keep", ErrNotReplayable)
	case r.Session != "":
		return airlock.Result{}, false, fmt.Errorf("%w: a session run depends on the session's earlier runs", ErrNotReplayable)
	}
	var tier airlock.Tier
	var names []string
	for _, t := range tiers {
		names = append(names, t.Name())
		if t.Name() == r.Tier {
			tier = t
		}
	}
	if tier == nil {
		return airlock.Result{}, false, fmt.Errorf("%w: tier %q is not in this build (have %s)", ErrNotReplayable, r.Tier, strings.Join(names, ", "))
	}
	job := *r.Job
	job.Clock, job.Seed, job.Session, job.Lifecycle = r.Clock, r.Seed, "", ""
	if !job.Kind.Language() {
		job.Image = r.Image // what ran, whatever the name means today
		// A tier whose programs see the host's real time refuses a
		// pinned clock: a run its caller did not pin is replayed unpinned
		// there (its recorded clock is only when it ran).
		unpinned := job
		unpinned.Clock = time.Time{}
		if r.Job.Clock.IsZero() && tier.Admit(job) != nil && tier.Admit(unpinned) == nil {
			job = unpinned
		}
	}
	res, err := tier.Run(ctx, job)
	if err != nil && res.Error == nil && res.Stopped == nil {
		res.SetError(err)
	}
	return res, OutputDigest(&res) == r.Output, nil
}

// writeMetrics writes the trail's counters in the exposition format.
func (a *auditor) writeMetrics(w io.Writer) {
	a.mu.Lock()
	failures, failing := a.failures, !a.since.IsZero()
	a.mu.Unlock()
	fmt.Fprintln(w, "# HELP airlock_audit_write_errors_total Audit trail writes that failed (each refused the runs it carried, unless audit_fail_open).")
	fmt.Fprintln(w, "# TYPE airlock_audit_write_errors_total counter")
	fmt.Fprintf(w, "airlock_audit_write_errors_total %d\n", failures)
	fmt.Fprintln(w, "# HELP airlock_audit_failing 1 from a failed audit write until a run's record is written again.")
	fmt.Fprintln(w, "# TYPE airlock_audit_failing gauge")
	v := 0
	if failing {
		v = 1
	}
	fmt.Fprintf(w, "airlock_audit_failing %d\n", v)
}

// close closes the audit file, after the last write.
func (a *auditor) close() error {
	if a.file == nil {
		return nil
	}
	return a.file.close()
}
