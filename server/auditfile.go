package server

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The hash chain. Every line the server writes starts with
//
//	{"seq":N,"prev":"HEX",
//
// where seq counts records from 1 and prev is the hex SHA-256 of the
// previous line's bytes (without its newline); the first record of a
// trail has seq 1 and a prev of 64 zeros. The chain runs on across
// rotation: the first record of a new file carries the hash of the last
// record of the file rotated before it, so removing a record, editing
// one or dropping a whole file in the middle is detectable by
// [VerifyAudit].

// genesis is the prev of a trail's first record.
var genesis [sha256.Size]byte

// chain is where the trail's hash chain stands: the last record written.
type chain struct {
	seq  uint64
	last [sha256.Size]byte
}

// link appends body (one encoded record, "{...}") as the chain's next
// line, with its newline, and advances c.
func (c *chain) link(dst, body []byte) []byte {
	start := len(dst)
	c.seq++
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendUint(dst, c.seq, 10)
	dst = append(dst, `,"prev":"`...)
	dst = hex.AppendEncode(dst, c.last[:])
	dst = append(dst, `",`...)
	dst = append(dst, body[1:]...)
	c.last = sha256.Sum256(dst[start:])
	return append(dst, '\n')
}

// AuditRotation says when the audit file is rotated and how many rotated
// files are kept. A rotated file is renamed to FILE.YYYYMMDDTHHMMSS.NNNNNNNNNZ
// (the time of rotation, UTC), so the names sort in the order written.
type AuditRotation struct {
	// MaxBytes rotates the file before a write would take it past this
	// size (default 100 MiB).
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// MaxAge rotates a file that was started this long ago, at the next
	// write (default 24h).
	MaxAge Duration `json:"max_age,omitempty"`
	// Keep is how many rotated files are kept; older ones are deleted
	// (default 10).
	Keep int `json:"keep,omitempty"`
	// KeepFor deletes rotated files rotated longer ago than this
	// (default: no age bound).
	KeepFor Duration `json:"keep_for,omitempty"`
}

const (
	defaultAuditMaxBytes = 100 << 20
	defaultAuditMaxAge   = 24 * time.Hour
	defaultAuditKeep     = 10
)

func (r *AuditRotation) validate() error {
	if r == nil {
		return nil
	}
	switch {
	case r.MaxBytes < 0:
		return errors.New("audit_rotation.max_bytes: must not be negative")
	case r.MaxAge < 0:
		return errors.New("audit_rotation.max_age: must not be negative")
	case r.Keep < 0:
		return errors.New("audit_rotation.keep: must not be negative")
	case r.KeepFor < 0:
		return errors.New("audit_rotation.keep_for: must not be negative")
	}
	return nil
}

// settings returns the rotation with the defaults filled in.
func (r *AuditRotation) settings() AuditRotation {
	var out AuditRotation
	if r != nil {
		out = *r
	}
	if out.MaxBytes == 0 {
		out.MaxBytes = defaultAuditMaxBytes
	}
	out.MaxAge = Duration(out.MaxAge.or(defaultAuditMaxAge))
	if out.Keep == 0 {
		out.Keep = defaultAuditKeep
	}
	return out
}

// rotatedLayout names a rotated file after its rotation time; fixed width,
// so names sort as times do.
const rotatedLayout = "20060102T150405.000000000Z"

// auditFile is the audit trail on disk: an append-only file of JSON lines,
// rotated by size and age. Only the auditor's one writer in progress
// touches it.
type auditFile struct {
	path    string
	rot     AuditRotation
	sync    bool
	now     func() time.Time
	f       *os.File
	size    int64     // bytes of whole lines in f
	started time.Time // when f was started, for max_age
	dirty   bool      // f may hold a part of a failed write past size
	// rotating is held while the file is renamed aside and old ones
	// pruned, and read-held by a reader opening the files, so that a
	// reader misses no file between listing and opening them.
	rotating sync.RWMutex
}

// openAuditFile opens the trail at path and finds where its chain stands:
// at the last record of the file, or of the newest rotated file when the
// file is empty.
func openAuditFile(path string, rot AuditRotation, sync bool, now func() time.Time) (*auditFile, chain, error) {
	af := &auditFile{path: path, rot: rot, sync: sync, now: now}
	if err := af.open(); err != nil {
		return nil, chain{}, err
	}
	ch, first, err := af.tail()
	if err != nil {
		af.f.Close()
		return nil, chain{}, err
	}
	af.started = first
	if af.size == 0 {
		rotated, err := af.rotated()
		if err == nil && len(rotated) > 0 {
			ch, err = lastLink(rotated[len(rotated)-1])
		}
		if err != nil {
			af.f.Close()
			return nil, chain{}, err
		}
	}
	return af, ch, nil
}

func (af *auditFile) open() error {
	f, err := os.OpenFile(af.path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	af.f, af.size, af.started, af.dirty = f, st.Size(), af.now(), false
	return nil
}

// tail reads the chain's state from the end of the open file, and the
// time its first record was written. A torn last line (a write cut short
// by a crash, whose runs were never answered) is cut off; a file whose
// last record is not chained (written before the chain existed) is
// rotated aside, so the chain starts whole in a new file.
func (af *auditFile) tail() (chain, time.Time, error) {
	if af.size == 0 {
		return chain{}, af.now(), nil
	}
	const window = 8 << 20 // more than the longest line (a 1 MiB job, escaped)
	off := max(0, af.size-window)
	buf := make([]byte, af.size-off)
	if _, err := af.f.ReadAt(buf, off); err != nil {
		return chain{}, time.Time{}, err
	}
	if end := bytes.LastIndexByte(buf, '\n') + 1; end < len(buf) {
		af.size = off + int64(end)
		if err := af.f.Truncate(af.size); err != nil {
			return chain{}, time.Time{}, err
		}
		buf = buf[:end]
	}
	lines := bytes.Split(bytes.TrimSuffix(buf, []byte("\n")), []byte("\n"))
	last := lines[len(lines)-1]
	if len(last) == 0 {
		return chain{}, af.now(), nil
	}
	var h struct {
		Seq uint64 `json:"seq"`
	}
	if json.Unmarshal(last, &h) != nil || h.Seq == 0 {
		if err := af.rotate(); err != nil {
			return chain{}, time.Time{}, err
		}
		return chain{}, af.now(), nil
	}
	started := af.now()
	first := make([]byte, min(af.size, 4096))
	if n, _ := af.f.ReadAt(first, 0); n > 0 {
		var t struct {
			Time time.Time `json:"time"`
		}
		line, _, _ := bytes.Cut(first[:n], []byte("\n"))
		if json.Unmarshal(line, &t) == nil && !t.Time.IsZero() {
			started = t.Time
		}
	}
	return chain{seq: h.Seq, last: sha256.Sum256(last)}, started, nil
}

// lastLink reads the chain's state at the end of a rotated file.
func lastLink(path string) (chain, error) {
	var ch chain
	err := scanLines(path, func(_ int, line []byte, _ bool) error {
		var h struct {
			Seq uint64 `json:"seq"`
		}
		if json.Unmarshal(line, &h) == nil && h.Seq > 0 {
			ch = chain{seq: h.Seq, last: sha256.Sum256(line)}
		}
		return nil
	})
	return ch, err
}

// write appends whole lines, rotating first when they are due. A write
// that fails is cut back, so the file holds whole lines only; the next
// write retries the cut if it failed too.
func (af *auditFile) write(b []byte) error {
	if af.f == nil {
		if err := af.open(); err != nil {
			return err
		}
	}
	if af.size > 0 && (af.size+int64(len(b)) > af.rot.MaxBytes || af.now().Sub(af.started) >= time.Duration(af.rot.MaxAge)) {
		if err := af.rotate(); err != nil {
			return err
		}
	}
	if af.dirty {
		if err := af.f.Truncate(af.size); err != nil {
			return fmt.Errorf("cutting back a failed write: %w", err)
		}
		af.dirty = false
	}
	_, err := af.f.Write(b)
	if err == nil && af.sync {
		err = af.f.Sync()
	}
	if err != nil {
		af.dirty = af.f.Truncate(af.size) != nil
		return err
	}
	af.size += int64(len(b))
	return nil
}

// rotate renames the file aside, starts a new one and applies retention.
func (af *auditFile) rotate() error {
	af.rotating.Lock()
	defer af.rotating.Unlock()
	if err := af.f.Close(); err != nil {
		af.f = nil
		return err
	}
	af.f = nil
	// Named after the newest rotated file even when the clock stood
	// still or went back, so that the names keep the order written.
	t := af.now().UTC()
	if rotated, err := af.rotated(); err == nil && len(rotated) > 0 {
		newest, _ := time.Parse(rotatedLayout, rotated[len(rotated)-1][len(af.path)+1:])
		if !t.After(newest) {
			t = newest.Add(time.Nanosecond)
		}
	}
	name := af.path + "." + t.Format(rotatedLayout)
	if err := os.Rename(af.path, name); err != nil {
		return fmt.Errorf("rotating the audit file: %w", err)
	}
	if err := af.open(); err != nil {
		return err
	}
	return af.prune()
}

// rotated lists the rotated files, oldest first.
func (af *auditFile) rotated() ([]string, error) {
	dir, base := filepath.Split(af.path)
	entries, err := os.ReadDir(filepath.Clean(dir))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if stamp, ok := strings.CutPrefix(e.Name(), base+"."); ok {
			if _, err := time.Parse(rotatedLayout, stamp); err == nil && e.Type().IsRegular() {
				out = append(out, filepath.Join(dir, e.Name()))
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// prune deletes the rotated files beyond keep and older than keep_for.
func (af *auditFile) prune() error {
	files, err := af.rotated()
	if err != nil {
		return err
	}
	var errs []error
	for i, name := range files {
		old := i < len(files)-af.rot.Keep
		if af.rot.KeepFor > 0 {
			stamp := name[len(af.path)+1:]
			t, _ := time.Parse(rotatedLayout, stamp)
			old = old || af.now().Sub(t) > time.Duration(af.rot.KeepFor)
		}
		if old {
			errs = append(errs, os.Remove(name))
		}
	}
	return errors.Join(errs...)
}

func (af *auditFile) close() error {
	if af.f == nil {
		return nil
	}
	return af.f.Close()
}

// ChainError is a break in the audit trail's hash chain: the first line
// that is not where the chain says it should be.
type ChainError struct {
	File    string
	Line    int
	Problem string
}

func (e *ChainError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Problem) }

// AuditSummary is what [VerifyAudit] found in an intact trail.
type AuditSummary struct {
	Files, Records int
	First, Last    uint64 // the first and last seq
	LastHash       string // the hex SHA-256 of the last record
}

// VerifyAudit checks the hash chain across audit files given in the order
// they were written (rotated files oldest first, then the current one).
// The first record checked is taken as it is, unless it claims to be a
// trail's first (seq 1), whose prev must be zeros; every later one must
// carry the next seq and the hash of the line before it. It returns a
// *ChainError naming the first bad line, or an error reading a file. An
// edit of the very last record, or the removal of the last records, is
// not detectable from the files alone: compare the summary's last hash
// with one kept elsewhere (a log system the files are shipped to).
func VerifyAudit(files []string) (AuditSummary, error) {
	var sum AuditSummary
	var ch chain
	var prevFile string
	var prevLine int
	for _, file := range files {
		sum.Files++
		err := scanLines(file, func(n int, line []byte, torn bool) error {
			bad := func(format string, args ...any) error {
				return &ChainError{File: file, Line: n, Problem: fmt.Sprintf(format, args...)}
			}
			if torn {
				return bad("bad JSON: a last line without its newline (a write cut short)")
			}
			var h struct {
				Seq  uint64 `json:"seq"`
				Prev string `json:"prev"`
			}
			if !json.Valid(line) {
				return bad("bad JSON")
			}
			// Only the chain is checked, not the record's fields, so
			// that trails of other versions verify too.
			if err := json.Unmarshal(line, &h); err != nil {
				return bad("bad record: %v", err)
			}
			switch {
			case h.Seq == 0:
				return bad("a record without a seq: not chained")
			case sum.Records == 0:
				if h.Seq == 1 && h.Prev != hex.EncodeToString(genesis[:]) {
					return bad("edited record: the trail's first record has prev %q, not zeros", h.Prev)
				}
				sum.First = h.Seq
			case h.Seq > ch.seq+1:
				return bad("removed record: seq %d follows seq %d (%s:%d); %d record(s) missing", h.Seq, ch.seq, prevFile, prevLine, h.Seq-ch.seq-1)
			case h.Seq <= ch.seq:
				return bad("out of order: seq %d follows seq %d (%s:%d): a record repeated or files given out of order", h.Seq, ch.seq, prevFile, prevLine)
			case h.Prev != hex.EncodeToString(ch.last[:]):
				return &ChainError{File: prevFile, Line: prevLine,
					Problem: fmt.Sprintf("edited record: its hash does not match the prev of the next record (%s:%d)", file, n)}
			}
			ch = chain{seq: h.Seq, last: sha256.Sum256(line)}
			sum.Records++
			prevFile, prevLine = file, n
			return nil
		})
		if err != nil {
			return sum, err
		}
	}
	sum.Last, sum.LastHash = ch.seq, hex.EncodeToString(ch.last[:])
	return sum, nil
}

// scanLines calls fn with each line of a file (without its newline),
// numbered from 1; torn marks a last line without a newline.
func scanLines(path string, fn func(n int, line []byte, torn bool) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			torn := line[len(line)-1] != '\n'
			if err := fn(n, bytes.TrimSuffix(line, []byte("\n")), torn); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
}
