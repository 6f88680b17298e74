package server

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
)

// Bounds on what a page shows of one value: the rest is summarised, so a
// megabyte argument cannot bury the page (its size and digest are shown).
const (
	shownArg  = 2 << 10
	shownText = 64 << 10
	shownHex  = 4 << 10
	shownDiff = 2000 // lines per side
)

// shown is a value as a page shows it: escaped, maybe truncated.
type shown struct {
	Text      string
	Truncated int // bytes of the escaped text left out
	Flagged   bool
}

// visible escapes s (hidden and bidirectional characters as \u escapes)
// and keeps the first n bytes of the result.
func visible(s string, n int) shown {
	v, flags := approve.Visible(s)
	return cut(v, n, len(flags) > 0)
}

func cut(v string, n int, flagged bool) shown {
	out := shown{Text: v, Flagged: flagged}
	if len(v) > n {
		out.Text, out.Truncated = v[:n], len(v)-n
	}
	return out
}

type pendingRow struct {
	Digest  approve.Digest
	Tenant  string
	Tier    string
	Kind    string
	Rule    string
	Summary shown
	Age     string
	Hidden  int
}

// pendingEntry is a pending job the viewer may decide.
type pendingEntry struct {
	d approve.Digest
	p *pending
}

// pendingOf lists the viewer's undecided pending jobs, oldest first.
func (s *Server) pendingOf(v *viewer) []pendingEntry {
	s.syncPending(s.base)
	now := s.now()
	var mine []pendingEntry
	s.mu.Lock()
	for d, p := range s.pending {
		if now.Sub(p.created) <= s.approvalTTL() && v.may(p.tenant) {
			mine = append(mine, pendingEntry{d, p})
		}
	}
	s.mu.Unlock()
	s.console.mu.Lock()
	mine = slices.DeleteFunc(mine, func(e pendingEntry) bool {
		dc := s.console.decided[e.d] // decided, unless asked for again since
		return dc != nil && !e.p.created.After(dc.At)
	})
	s.console.mu.Unlock()
	slices.SortFunc(mine, func(a, b pendingEntry) int {
		return cmp.Or(a.p.created.Compare(b.p.created), strings.Compare(string(a.d), string(b.d)))
	})
	return mine
}

func (s *Server) pendingRows(v *viewer) []pendingRow {
	now := s.now()
	mine := s.pendingOf(v)
	rows := make([]pendingRow, 0, len(mine))
	for _, e := range mine {
		job := e.p.job
		summary := job.Code
		if len(job.Argv) > 0 {
			summary = strings.Join(job.Argv, " ")
		}
		rows = append(rows, pendingRow{Digest: e.d, Tenant: e.p.tenant.Name, Tier: e.p.tier, Kind: string(job.Kind), Rule: e.p.rule,
			Summary: visible(truncate(summary, 4*shownArg), 200), Age: now.Sub(e.p.created).Round(time.Second).String(), Hidden: e.p.hiddenChars()})
	}
	return rows
}

func (s *Server) consolePending(w http.ResponseWriter, r *http.Request, v *viewer) {
	render(w, "pending.html", map[string]any{"Title": "Pending approvals", "V": v, "Rows": s.pendingRows(v)})
}

type fileView struct {
	Name   shown
	Size   int
	SHA256 string
	Binary bool
	Text   shown
	Hex    string
	HexCut int
}

type detailView struct {
	Title     string
	V         *viewer
	Digest    approve.Digest
	D         approve.Display
	Rule      string
	Argv      []shown
	Files     []fileView
	Env       []shown
	Code      shown
	Stdin     *fileView
	Grants    []string
	Flagged   map[string]bool
	Expires   time.Time
	Decision  *decision
	Reason    shown
	Diff      []diffLine
	DiffNote  string
	DiffBase  approve.Digest
	DiffLink  string
	Runs      []runRow
	Pending   bool
	Problem   string
	LimitRows []string
	Input     []inputRow
	InputCut  int // values not shown past maxInputRows
	Module    *approve.Content
}

// inputRow is one value of a job's input: where it is (each key in its
// own element, as the display adds no quotes) and its type, so that the
// string "1", the integer 1 and the float 1.0 read differently.
type inputRow struct {
	Path  []pathStep
	Type  string
	Value shown
}

type pathStep struct {
	Key   string // escaped by approve.Display
	Index int    // for a list element (Key empty)
	List  bool
}

// maxInputRows bounds the input values a page lists.
const maxInputRows = 500

// inputRows lists a displayed input's values (leaves, and empty lists and
// objects), keys in order, up to maxInputRows; it returns how many more
// there are.
func inputRows(in map[string]any) ([]inputRow, int) {
	var rows []inputRow
	more := 0
	var walk func(path []pathStep, v any)
	add := func(path []pathStep, typ, text string) {
		if len(rows) >= maxInputRows {
			more++
			return
		}
		rows = append(rows, inputRow{Path: slices.Clone(path), Type: typ, Value: cut(text, shownArg, strings.Contains(text, `\`))})
	}
	walk = func(path []pathStep, v any) {
		switch x := v.(type) {
		case map[string]any:
			if len(x) == 0 && len(path) > 0 {
				add(path, "object", "{} (empty)")
			}
			for _, k := range slices.Sorted(maps.Keys(x)) {
				walk(append(path, pathStep{Key: k}), x[k])
			}
		case []any:
			if len(x) == 0 {
				add(path, "list", "[] (empty)")
			}
			for i, e := range x {
				walk(append(path, pathStep{Index: i, List: true}), e)
			}
		case string:
			add(path, "text", x)
		case json.Number: // a whole float, shown with its .0
			add(path, "float", string(x))
		case float64:
			add(path, "float", strconv.FormatFloat(x, 'g', -1, 64))
		case bool:
			add(path, "boolean", strconv.FormatBool(x))
		case nil:
			add(path, "null", "null")
		default:
			add(path, "integer", fmt.Sprint(x))
		}
	}
	walk(nil, in)
	return rows, more
}

// contentView shows a file; name is already escaped.
func contentView(name string, c approve.Content, raw string) fileView {
	fv := fileView{Name: cut(name, shownArg, strings.Contains(name, `\`)), Size: c.Size, SHA256: c.SHA256, Binary: c.Binary}
	if c.Binary {
		fv.Hex = hexDump(raw[:min(len(raw), shownHex)])
		fv.HexCut = max(0, len(raw)-shownHex)
	} else {
		fv.Text = cut(c.Text, shownText, strings.Contains(c.Text, `\u`) || strings.Contains(c.Text, `\x`))
	}
	return fv
}

// hexDump shows bytes as offset, hex and printable ASCII, 16 a line.
func hexDump(b string) string {
	var sb strings.Builder
	for i := 0; i < len(b); i += 16 {
		line := b[i:min(len(b), i+16)]
		fmt.Fprintf(&sb, "%08x  %-47s  ", i, spaced(hex.EncodeToString([]byte(line))))
		for j := 0; j < len(line); j++ {
			if c := line[j]; c >= 0x20 && c < 0x7f {
				sb.WriteByte(c)
			} else {
				sb.WriteByte('.')
			}
		}
		sb.WriteByte('\n')
	}
	return sb.String()
}

func spaced(h string) string {
	var parts []string
	for i := 0; i < len(h); i += 2 {
		parts = append(parts, h[i:i+2])
	}
	return strings.Join(parts, " ")
}

// grantWords spells a job's grants out for a person.
func grantWords(g approve.DisplayGrants) []string {
	var out []string
	for _, n := range g.Net {
		methods := "any method"
		if len(n.Methods) > 0 {
			methods = strings.Join(n.Methods, ", ")
		}
		line := "Network: may connect to " + n.Host + " with " + methods
		if len(n.Ports) > 0 {
			line += fmt.Sprintf(" on ports %v", n.Ports)
		}
		if n.Scheme != "" {
			line += " over " + n.Scheme
		}
		if len(n.Paths) > 0 {
			line += " to paths " + strings.Join(n.Paths, ", ")
		}
		out = append(out, line)
	}
	for _, p := range g.Read {
		out = append(out, "Host path: may read "+p)
	}
	if g.ScratchMB > 0 {
		out = append(out, fmt.Sprintf("Scratch: may write %d MB of scratch space", g.ScratchMB))
	}
	if g.Spawn {
		out = append(out, "Spawn: may start other programs")
	}
	for _, n := range g.Secrets {
		out = append(out, "Secret: receives the credential named "+n+" (value not shown)")
	}
	for _, c := range g.Credentials {
		env, ref, _ := strings.Cut(c, "=")
		out = append(out, "Credential: the account's executor puts the credential "+ref+" in the variable "+env+" (value not shown)")
	}
	if len(out) == 0 {
		out = append(out, "None: no network, no host paths, no programs, no secrets, no credentials.")
	}
	return out
}

func limitWords(l airlock.Limits) []string {
	var out []string
	add := func(name string, v int64, unit string) {
		if v != 0 {
			out = append(out, strings.TrimSpace(fmt.Sprintf("%s: %d %s", name, v, unit)))
		}
	}
	add("Wall clock", l.WallMS, "ms")
	add("CPU", l.CPUMS, "ms")
	add("Memory", l.MemoryMB, "MB")
	add("Output", l.OutputBytes, "bytes")
	add("Processes", l.Pids, "")
	add("Open files", l.Files, "")
	add("Steps", l.Steps, "")
	if len(out) == 0 {
		out = append(out, "the tier's defaults")
	}
	return out
}

// consoleLookup finds digest d among the pending jobs and decisions the viewer
// may see.
func (s *Server) consoleLookup(v *viewer, d approve.Digest) (*pending, *decision) {
	s.syncPending(s.base)
	if dc := s.decisionFor(d); dc != nil {
		if !v.mayName(dc.Tenant) {
			return nil, nil
		}
		return &pending{job: dc.job, tier: dc.tier, rule: dc.rule}, dc
	}
	s.mu.Lock()
	p := s.pending[d]
	s.mu.Unlock()
	if p == nil || s.now().Sub(p.created) > s.approvalTTL() || !v.may(p.tenant) {
		return nil, nil
	}
	return p, nil
}

func (s *Server) consoleDetail(w http.ResponseWriter, r *http.Request, v *viewer) {
	s.renderDetail(w, v, approve.Digest(r.PathValue("digest")), "")
}

func (s *Server) renderDetail(w http.ResponseWriter, v *viewer, d approve.Digest, problem string) {
	p, dc := s.consoleLookup(v, d)
	if p == nil {
		consoleError(w, http.StatusNotFound, "No pending approval with that digest for your tenants.")
		return
	}
	tenantName := ""
	if dc != nil {
		tenantName = dc.Tenant
	} else {
		tenantName = p.tenant.Name
	}
	job := p.job
	disp := s.shown(p, tenantName)
	dv := detailView{Title: "Approval " + string(d), V: v, Digest: d, D: disp, Rule: p.rule, Decision: dc, Pending: dc == nil,
		Grants: grantWords(disp.Grants), LimitRows: limitWords(disp.Limits), Flagged: map[string]bool{}, Problem: problem}
	for _, f := range disp.Fields {
		dv.Flagged[f] = true
	}
	for i, a := range disp.Argv {
		dv.Argv = append(dv.Argv, cut(a, shownArg, dv.Flagged["argv["+strconv.Itoa(i)+"]"]))
	}
	for _, f := range disp.Files {
		raw := ""
		for name, content := range job.Files {
			if v, _ := approve.Visible(name); v == f.Name {
				raw = content
			}
		}
		dv.Files = append(dv.Files, contentView(f.Name, f.Content, raw))
	}
	for _, e := range disp.Env {
		dv.Env = append(dv.Env, cut(e, shownArg, strings.Contains(e, `\`)))
	}
	dv.Code = cut(disp.Code, shownText, dv.Flagged["code"])
	dv.Input, dv.InputCut = inputRows(disp.Input)
	dv.Module = disp.Module
	if disp.Stdin != nil {
		fv := contentView("stdin", *disp.Stdin, job.Stdin)
		dv.Stdin = &fv
	}
	if dc != nil {
		dv.Reason = visible(dc.Reason, maxReason*6)
		dv.Runs = s.runsOf(v, d)
	} else {
		s.mu.Lock()
		if pp := s.pending[d]; pp != nil {
			dv.Expires = pp.created.Add(s.approvalTTL())
		}
		s.mu.Unlock()
	}
	dv.Diff, dv.DiffBase, dv.DiffLink, dv.DiffNote = s.diffToApproved(d, tenantName, &job, disp)
	render(w, "detail.html", dv)
}

// diffToApproved diffs a job against the latest approved job of the same
// tenant and kind: a decision the console keeps, else the newest
// approval of one in the audit files. It returns the lines, the base's
// digest and its page, or a note instead.
func (s *Server) diffToApproved(d approve.Digest, tenant string, job *airlock.Job, disp approve.Display) ([]diffLine, approve.Digest, string, string) {
	s.console.mu.Lock()
	var base *decision
	for _, dc := range s.console.decided {
		if dc.Denied || dc.Digest == d || dc.Tenant != tenant || dc.job.Kind != job.Kind {
			continue
		}
		if base == nil || dc.At.After(base.At) {
			base = dc
		}
	}
	s.console.mu.Unlock()
	var old approve.Display
	var baseDigest approve.Digest
	var link string
	if base != nil {
		old, baseDigest, link = approve.DisplayOf(&base.job, base.tier, base.Tenant), base.Digest, "/console/approvals/"+string(base.Digest)
	} else if rec, seq := s.approvedInTrail(d, tenant, job.Kind); rec != nil {
		old, baseDigest, link = approve.DisplayOf(rec.Job, rec.Tier, rec.Tenant), rec.Digest, recordLink(seq)
	} else {
		return nil, "", "", "No earlier approved " + string(job.Kind) + " job of this tenant to compare with."
	}
	lines, ok := diff(describe(old), describe(disp))
	if !ok {
		return nil, baseDigest, link, "The jobs are too large to compare line by line."
	}
	return lines, baseDigest, link, ""
}

// approvedInTrail finds the newest approval in the audit files of a job
// of tenant and kind other than d, and its seq.
func (s *Server) approvedInTrail(d approve.Digest, tenant string, kind airlock.Kind) (*Record, uint64) {
	if s.audit.file == nil {
		return nil, 0
	}
	files, err := s.audit.file.openTrail()
	if err != nil {
		return nil, 0
	}
	defer closeTrail(files)
	// The tenant's name, as the record's JSON spells it, passes over
	// most lines without decoding them.
	name, _ := json.Marshal(tenant)
	needle := append([]byte(`"tenant":`), name...)
	for i := len(files) - 1; i >= 0; i-- {
		var found *Record
		var seq uint64
		_ = eachLine(files[i].f, func(_ int, line []byte) bool {
			if !bytes.Contains(line, needle) || !bytes.Contains(line, []byte(`"request":"approval"`)) {
				return true
			}
			var rec Record
			if json.Unmarshal(line, &rec) != nil || rec.Request != "approval" || rec.Outcome != "approved" ||
				rec.Tenant != tenant || rec.Digest == d || rec.Job == nil || rec.Job.Kind != kind {
				return true
			}
			found, seq = &rec, lineSeq(line)
			return true
		})
		if found != nil {
			return found, seq
		}
	}
	return nil, 0
}

// describe lays a displayed job out as lines, for the diff.
func describe(d approve.Display) []string {
	out := []string{"tier: " + d.Tier, "kind: " + d.Kind, "situation: " + d.Situation, "image: " + cmp.Or(d.Image, "(the default)")}
	if d.Account != "" {
		out = append(out, "account: "+d.Account)
	}
	if d.Clock != "" {
		out = append(out, "clock: "+d.Clock)
	}
	if d.Seed != 0 {
		out = append(out, "seed: "+strconv.FormatUint(d.Seed, 10))
	}
	if d.Module != nil {
		out = append(out, fmt.Sprintf("module: %d bytes, sha256 %s", d.Module.Size, d.Module.SHA256))
	}
	for i, a := range d.Argv {
		out = append(out, fmt.Sprintf("argv[%d]: %s", i, truncate(a, shownArg)))
	}
	for _, f := range d.Files {
		out = append(out, fmt.Sprintf("file %s: %d bytes, sha256 %s", f.Name, f.Size, f.SHA256))
	}
	for _, e := range d.Env {
		out = append(out, "env "+truncate(e, shownArg))
	}
	rows, more := inputRows(d.Input)
	for _, r := range rows {
		var p strings.Builder
		for _, st := range r.Path {
			if st.List {
				fmt.Fprintf(&p, "[%d]", st.Index)
			} else {
				p.WriteString("[" + strconv.Quote(st.Key) + "]")
			}
		}
		out = append(out, fmt.Sprintf("input%s (%s): %s", p.String(), r.Type, r.Value.Text))
	}
	if more > 0 {
		out = append(out, fmt.Sprintf("input: %d more values", more))
	}
	for _, l := range strings.Split(d.Code, "\n") {
		if d.Code != "" {
			out = append(out, "code: "+truncate(l, shownArg))
		}
	}
	for _, g := range grantWords(d.Grants) {
		out = append(out, "grant: "+g)
	}
	for _, l := range limitWords(d.Limits) {
		out = append(out, "limit: "+l)
	}
	return out
}

type diffLine struct {
	Op   string // " ", "-", "+"
	Text string
}

// diff is a longest-common-subsequence line diff; it gives up (false)
// past shownDiff lines a side.
func diff(a, b []string) ([]diffLine, bool) {
	if len(a) > shownDiff || len(b) > shownDiff {
		return nil, false
	}
	// lcs[i][j]: the LCS length of a[i:] and b[j:].
	lcs := make([][]int32, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []diffLine
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			out = append(out, diffLine{" ", a[i]})
			i, j = i+1, j+1
		case lcs[i+1][j] >= lcs[i][j+1]:
			out = append(out, diffLine{"-", a[i]})
			i++
		default:
			out = append(out, diffLine{"+", b[j]})
			j++
		}
	}
	for ; i < len(a); i++ {
		out = append(out, diffLine{"-", a[i]})
	}
	for ; j < len(b); j++ {
		out = append(out, diffLine{"+", b[j]})
	}
	return out, true
}

func (s *Server) consoleDecide(w http.ResponseWriter, r *http.Request, v *viewer) {
	d := approve.Digest(r.PathValue("digest"))
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	verdict := r.PostFormValue("decision")
	s.syncPending(r.Context())
	s.mu.Lock()
	p := s.pending[d]
	s.mu.Unlock()
	if p == nil || s.now().Sub(p.created) > s.approvalTTL() || !v.may(p.tenant) {
		if pp, dc := s.consoleLookup(v, d); pp != nil && dc != nil {
			s.renderDetail(w, v, d, "This job was already decided.")
			return
		}
		consoleError(w, http.StatusNotFound, "No pending approval with that digest for your tenants.")
		return
	}
	switch {
	case verdict != "approve" && verdict != "deny":
		s.renderDetail(w, v, d, "Choose approve or deny.")
		return
	case reason == "":
		s.renderDetail(w, v, d, "A reason is required: it goes into the audit trail.")
		return
	case len(reason) > maxReason:
		s.renderDetail(w, v, d, fmt.Sprintf("The reason is longer than %d bytes.", maxReason))
		return
	}
	dc, err := s.decide(r.Context(), p, d, v.Approver, reason, verdict == "deny", true)
	if err != nil {
		consoleError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if dc == nil {
		s.renderDetail(w, v, d, "This job was already decided.")
		return
	}
	http.Redirect(w, r, "/console/approvals/"+string(d), http.StatusSeeOther)
}

type runRow struct {
	ID       int64
	Seq      uint64 // in the audit file (0: none)
	Link     string // the record's page
	Label    string // how the record is named in lists
	Time     time.Time
	Tenant   string
	Request  string
	Tier     string
	Outcome  string
	Stale    bool
	Approver string
	Reason   shown
	Digest   approve.Digest
	Error    shown
}

func rowOf(k keptRun, link string) runRow {
	rec := k.Rec
	label := strconv.FormatInt(k.ID, 10)
	if k.Seq > 0 && strings.HasPrefix(link, "/console/records/") {
		label = "#" + strconv.FormatUint(k.Seq, 10)
	}
	return runRow{ID: k.ID, Seq: k.Seq, Link: link, Label: label, Time: rec.Time, Tenant: rec.Tenant, Request: rec.Request, Tier: rec.Tier, Outcome: rec.Outcome,
		Stale: strings.Contains(rec.Error, approve.Stale), Approver: rec.Approver, Reason: visible(rec.Reason, 200),
		Digest: rec.Digest, Error: visible(rec.Error, 300)}
}

// runsOf lists the records of digest d's runs, and the runs refused
// because their job differed from d's approved one.
func (s *Server) runsOf(v *viewer, d approve.Digest) []runRow {
	s.console.mu.Lock()
	defer s.console.mu.Unlock()
	var out []runRow
	for _, k := range s.console.keptRuns() {
		if !v.mayName(k.Rec.Tenant) {
			continue
		}
		if k.Rec.Request != "approval" && k.Rec.Digest == d || strings.Contains(k.Rec.Error, "approved "+string(d)) {
			out = append(out, rowOf(k, s.keptLink(k)))
		}
	}
	return out
}

// keptLink is the page of a kept run: its record in the audit file when
// there is one, else the console's own copy.
func (s *Server) keptLink(k keptRun) string {
	if k.Seq > 0 && s.audit.file != nil {
		return recordLink(k.Seq)
	}
	return "/console/runs/" + strconv.FormatInt(k.ID, 10)
}

func (s *Server) consoleAudit(w http.ResponseWriter, r *http.Request, v *viewer) {
	q := r.URL.Query()
	aq := auditQuery{tenant: q.Get("tenant"), tier: q.Get("tier"), outcome: q.Get("outcome")}
	var errSince, errUntil, errBefore error
	aq.since, errSince = parseWhen(q.Get("since"))
	aq.until, errUntil = parseWhen(q.Get("until"))
	if b := q.Get("before"); b != "" {
		aq.before, errBefore = strconv.ParseUint(b, 10, 64)
	}
	var problem string
	switch {
	case errSince != nil || errUntil != nil:
		problem = "Times are YYYY-MM-DDTHH:MM, in UTC."
	case errBefore != nil:
		problem = "That page of the trail does not exist; showing the newest records."
		aq.before = 0
	}
	var page trailPage
	fromFile := s.audit.file != nil
	if fromFile {
		var err error
		if page, err = s.searchTrail(v, aq, auditPageSize); err != nil {
			consoleError(w, http.StatusInternalServerError, "The audit files could not be read.")
			return
		}
	} else {
		page.Rows = s.keptRows(v, aq)
	}
	// The links to the newest and the next older page keep the search.
	nq := url.Values{}
	for _, k := range []string{"tenant", "tier", "outcome", "since", "until"} {
		if q.Get(k) != "" {
			nq.Set(k, q.Get(k))
		}
	}
	var newer, older string
	if aq.before > 0 {
		newer = "/console/audit?" + nq.Encode()
	}
	if page.Older > 0 {
		nq.Set("before", strconv.FormatUint(page.Older, 10))
		older = "/console/audit?" + nq.Encode()
	}
	var names []string
	for _, t := range v.tenants {
		names = append(names, t.Name)
	}
	render(w, "audit.html", map[string]any{"Title": "Audit and runs", "V": v, "Rows": page.Rows, "Tenants": names,
		"Tenant": aq.tenant, "Tier": aq.tier, "Outcome": aq.outcome, "Since": q.Get("since"), "Until": q.Get("until"), "Problem": problem,
		"FromFile": fromFile, "Older": older, "Newer": newer, "Unread": page.Unread, "Chart": s.latencyChart()})
}

// keptRows searches the records the console keeps in memory, for a
// server without an audit file.
func (s *Server) keptRows(v *viewer, aq auditQuery) []runRow {
	var rows []runRow
	s.console.mu.Lock()
	defer s.console.mu.Unlock()
	kept := s.console.keptRuns()
	for i := len(kept) - 1; i >= 0; i-- {
		if k := kept[i]; aq.match(v, &k.Rec) {
			rows = append(rows, rowOf(k, s.keptLink(k)))
		}
	}
	return rows
}

func parseWhen(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339, "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("bad time %q", s)
}

func (s *Server) keptRun(v *viewer, id int64) (keptRun, bool) {
	s.console.mu.Lock()
	defer s.console.mu.Unlock()
	for _, k := range s.console.keptRuns() {
		if k.ID == id && v.mayName(k.Rec.Tenant) {
			return k, true
		}
	}
	return keptRun{}, false
}

// replayable says whether `airlock replay` can re-run a record, and if
// not, why (as Replay would refuse it).
func replayable(rec *Record) string {
	switch {
	case rec.Request == "approval":
		return "this is a decision, not a run"
	case rec.Job == nil:
		return "the record holds no job"
	case !rec.Job.Kind.Language() && !imageDigest(rec.Image):
		return "a command that ran in the host view depends on the host"
	case len(rec.Job.Grants.Secrets) > 0:
		return "the job held credentials, which the trail does not keep"
	case rec.Session != "":
		return "a session run depends on the session's earlier runs"
	}
	return ""
}

func (s *Server) consoleRun(w http.ResponseWriter, r *http.Request, v *viewer) {
	k, ok := s.keptRun(v, parseID(r))
	if !ok {
		consoleError(w, http.StatusNotFound, "No such run for your tenants (the console keeps the latest runs only; the audit file keeps all).")
		return
	}
	s.renderRecord(w, v, k, fmt.Sprintf("Run %d", k.ID), "", fmt.Sprintf("/console/runs/%d/record", k.ID), fmt.Sprintf("airlock-record-%d.jsonl", k.ID))
}

// consoleTrailRecord shows record seq as the audit file holds it, with
// the run's result when the console still keeps it.
func (s *Server) consoleTrailRecord(w http.ResponseWriter, r *http.Request, v *viewer) {
	seq, rec, path, n, _, ok := s.trailRecord(w, r, v)
	if !ok {
		return
	}
	k := keptRun{Seq: seq, Rec: rec}
	s.console.mu.Lock()
	for _, kr := range s.console.keptRuns() {
		if kr.Seq == seq && kr.Rec.Tenant == rec.Tenant {
			k.ID, k.Res = kr.ID, kr.Res
		}
	}
	s.console.mu.Unlock()
	s.renderRecord(w, v, k, fmt.Sprintf("Record %d", seq), fmt.Sprintf("%s:%d", path, n),
		recordLink(seq)+"/line", fmt.Sprintf("airlock-record-%d.jsonl", seq))
}

// consoleTrailLine downloads record seq's line as the audit file holds
// it (with its place in the hash chain), for `airlock replay`.
func (s *Server) consoleTrailLine(w http.ResponseWriter, r *http.Request, v *viewer) {
	seq, _, _, _, line, ok := s.trailRecord(w, r, v)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="airlock-record-%d.jsonl"`, seq))
	_, _ = w.Write(append(line, '\n'))
}

// trailRecord reads the record the path names from the audit files, if
// it is of one of the viewer's tenants; otherwise it answers the request.
func (s *Server) trailRecord(w http.ResponseWriter, r *http.Request, v *viewer) (seq uint64, rec Record, path string, n int, line []byte, ok bool) {
	const missing = "No such record for your tenants in the audit files."
	if s.audit.file == nil {
		consoleError(w, http.StatusNotFound, "This server writes no audit file; the audit page lists the runs the console keeps.")
		return
	}
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil {
		consoleError(w, http.StatusNotFound, missing)
		return
	}
	path, n, line, err = s.trailLine(seq)
	switch {
	case errors.Is(err, errNoRecord):
		consoleError(w, http.StatusNotFound, missing)
		return
	case err != nil:
		consoleError(w, http.StatusInternalServerError, "The audit files could not be read.")
		return
	}
	if json.Unmarshal(line, &rec) != nil || !v.mayName(rec.Tenant) {
		// Another tenant's record is answered as a missing one.
		consoleError(w, http.StatusNotFound, missing)
		return
	}
	return seq, rec, path, n, line, true
}

// renderRecord shows a record: ref is its FILE:N in the audit files ("":
// none), download where its line is fetched as file.
func (s *Server) renderRecord(w http.ResponseWriter, v *viewer, k keptRun, title, ref, download, file string) {
	data := map[string]any{"Title": title, "V": v, "Row": rowOf(k, ""), "Rec": k.Rec,
		"NotReplayable": replayable(&k.Rec), "Limits": limitWords(k.Rec.Limits), "Grants": grantWords(approve.DisplayOf(&airlock.Job{Grants: k.Rec.Grants}, "", "").Grants),
		"Download": download, "File": file,
		// The job's own image reference on a decision's record: escaped
		// as every string of a job is.
		"Image": visible(k.Rec.Image, shownArg)}
	if ref != "" {
		data["Ref"] = shellQuote(ref)
	}
	if k.Res != nil {
		res := k.Res
		if res.Value != nil {
			if b, err := json.Marshal(res.Value); err == nil {
				data["Value"] = visibleText(string(b))
			}
		}
		data["Stdout"] = visibleText(res.Stdout)
		data["Stderr"] = visibleText(res.Stderr)
		var files []fileView
		for _, name := range slices.Sorted(maps.Keys(res.Files)) {
			c := approve.DisplayOf(&airlock.Job{Files: map[string]string{name: res.Files[name]}}, "", "").Files[0]
			files = append(files, contentView(c.Name, c.Content, res.Files[name]))
		}
		data["Files"] = files
		if res.Error != nil {
			data["ResError"] = visible(string(res.Error.Kind)+": "+res.Error.Message, shownText)
		}
		if res.Stopped != nil {
			data["Stopped"] = visible(string(res.Stopped.Reason)+": "+res.Stopped.Detail, shownText)
		}
		data["HasResult"] = true
		data["Timings"] = res.Timings
	}
	render(w, "run.html", data)
}

// visibleText escapes multi-line output (line breaks kept) for display.
func visibleText(s string) shown {
	c := approve.DisplayOf(&airlock.Job{Stdin: s}, "", "").Stdin
	if c == nil {
		return shown{}
	}
	if c.Binary {
		return shown{Text: hexDump(s[:min(len(s), shownHex)]), Truncated: max(0, len(s)-shownHex)}
	}
	return cut(c.Text, shownText, strings.Contains(c.Text, `\u`) || strings.Contains(c.Text, `\x`))
}

// consoleRecord downloads a run's audit line, for `airlock replay`.
func (s *Server) consoleRecord(w http.ResponseWriter, r *http.Request, v *viewer) {
	k, ok := s.keptRun(v, parseID(r))
	if !ok {
		consoleError(w, http.StatusNotFound, "No such run for your tenants.")
		return
	}
	line, err := appendRecord(nil, &k.Rec)
	if err != nil {
		consoleError(w, http.StatusInternalServerError, "The record could not be encoded.")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="airlock-record-%d.jsonl"`, k.ID))
	_, _ = w.Write(append(line, '\n'))
}
