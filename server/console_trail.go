package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"
)

// The console's audit pages read the audit files themselves (rotated
// files and the current one), so that an approver can search the whole
// trail that is kept, not only what this process saw. A record is named
// by its seq in the hash chain, which stays the same across rotation.

// auditPageSize is how many records one audit page lists.
const auditPageSize = 50

// trailFile is one file of the trail, open for reading, with the seq of
// its first record (0: none).
type trailFile struct {
	path  string
	f     *os.File
	first uint64
}

// openTrail opens the trail's files, oldest first. Rotation waits while
// they are opened, so that none is missed between listing and opening;
// an open file stays readable when it is rotated or pruned later.
func (af *auditFile) openTrail() ([]trailFile, error) {
	af.rotating.RLock()
	defer af.rotating.RUnlock()
	names, err := af.rotated()
	if err != nil {
		return nil, err
	}
	var out []trailFile
	for _, name := range append(names, af.path) {
		f, err := os.Open(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			closeTrail(out)
			return nil, err
		}
		var head [48]byte
		n, _ := f.ReadAt(head[:], 0)
		out = append(out, trailFile{path: name, f: f, first: lineSeq(head[:n])})
	}
	return out, nil
}

func closeTrail(files []trailFile) {
	for _, tf := range files {
		tf.f.Close()
	}
}

// lineSeq reads the seq a chained line starts with ({"seq":N,...); 0 for
// a line that is not chained.
func lineSeq(line []byte) uint64 {
	rest, ok := bytes.CutPrefix(line, []byte(`{"seq":`))
	if !ok {
		return 0
	}
	end := bytes.IndexByte(rest, ',')
	if end < 0 {
		return 0
	}
	n, err := strconv.ParseUint(string(rest[:end]), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// eachLine calls fn with each whole line of f from its start, numbered
// from 1, until fn returns false. A last line without its newline is a
// write in progress, and is not given.
func eachLine(f *os.File, fn func(n int, line []byte) bool) error {
	r := bufio.NewReaderSize(io.NewSectionReader(f, 0, 1<<62), 64<<10)
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if !fn(n, line[:len(line)-1]) {
			return nil
		}
	}
}

// auditQuery is a search of the audit page.
type auditQuery struct {
	tenant, tier, outcome string
	since, until          time.Time
	before                uint64 // only records older than this seq (0: from the newest)
}

func (q *auditQuery) match(v *viewer, rec *Record) bool {
	switch {
	case !v.mayName(rec.Tenant),
		q.tenant != "" && rec.Tenant != q.tenant,
		q.tier != "" && rec.Tier != q.tier,
		q.outcome != "" && !strings.HasPrefix(rec.Outcome, q.outcome),
		!q.since.IsZero() && rec.Time.Before(q.since),
		!q.until.IsZero() && rec.Time.After(q.until):
		return false
	}
	return true
}

// trailPage is one page of a search of the audit files.
type trailPage struct {
	Rows   []runRow
	Older  uint64 // the before= of the next, older page (0: this is the last)
	Unread int    // lines that are not chained records (written before the chain, or damaged)
}

// searchTrail lists the newest n records of the viewer's tenants that
// match q, newest first. Files wholly newer than q.before are not read;
// within a file only the newest matches are kept.
func (s *Server) searchTrail(v *viewer, q auditQuery, n int) (trailPage, error) {
	files, err := s.audit.file.openTrail()
	if err != nil {
		return trailPage{}, err
	}
	defer closeTrail(files)
	var page trailPage
	want := n + 1 // one more tells whether there is an older page
	for i := len(files) - 1; i >= 0 && len(page.Rows) < want; i-- {
		tf := files[i]
		if q.before > 0 && tf.first >= q.before {
			continue
		}
		keep := want - len(page.Rows)
		var found []runRow // the newest keep matches, as a ring from next
		next := 0
		err := eachLine(tf.f, func(_ int, line []byte) bool {
			seq := lineSeq(line)
			if seq == 0 {
				page.Unread++
				return true
			}
			if q.before > 0 && seq >= q.before {
				return false // seqs only grow within a file
			}
			var rec Record
			if json.Unmarshal(line, &rec) != nil {
				page.Unread++
				return true
			}
			if !q.match(v, &rec) {
				return true
			}
			row := rowOf(keptRun{Seq: seq, Rec: rec}, recordLink(seq))
			if len(found) < keep {
				found = append(found, row)
			} else {
				found[next] = row
				next = (next + 1) % keep
			}
			return true
		})
		if err != nil {
			return trailPage{}, err
		}
		for j := len(found) - 1; j >= 0; j-- {
			page.Rows = append(page.Rows, found[(next+j)%len(found)])
		}
	}
	if len(page.Rows) > n {
		page.Rows = page.Rows[:n]
		page.Older = page.Rows[n-1].Seq
	}
	return page, nil
}

func recordLink(seq uint64) string { return "/console/records/" + strconv.FormatUint(seq, 10) }

// errNoRecord is a seq the trail's files do not hold (any more).
var errNoRecord = errors.New("no such record in the audit files")

// trailLine finds the line of record seq: the file that holds it, its
// line number there, and the line's bytes as written.
func (s *Server) trailLine(seq uint64) (path string, n int, line []byte, err error) {
	files, err := s.audit.file.openTrail()
	if err != nil {
		return "", 0, nil, err
	}
	defer closeTrail(files)
	var tf *trailFile
	for i := range files {
		if files[i].first > 0 && files[i].first <= seq {
			tf = &files[i]
		}
	}
	if tf == nil || seq == 0 {
		return "", 0, nil, errNoRecord
	}
	err = eachLine(tf.f, func(i int, l []byte) bool {
		switch got := lineSeq(l); {
		case got == seq:
			n, line = i, bytes.Clone(l)
			return false
		case got > seq:
			return false
		}
		return true
	})
	if err != nil {
		return "", 0, nil, err
	}
	if line == nil {
		return "", 0, nil, errNoRecord
	}
	return tf.path, n, line, nil
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._:-+=@%,", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
