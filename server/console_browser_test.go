package server_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/server"
)

// browserWait bounds each wait for the page: generous, since a shared
// machine may be slow, but never unbounded.
const browserWait = 60 * time.Second

// browser is a headless Chromium tab and what it saw: dialogs, console
// errors and the hosts it asked for.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base *url.URL

	mu       sync.Mutex
	dialogs  []string
	errors   []string
	requests []string // URLs of requests to anything but the console
}

// chromium finds a Chromium: $AIRLOCK_CHROMIUM, else one on PATH.
func chromium() string {
	if p := os.Getenv("AIRLOCK_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

func newBrowser(t *testing.T, f *fixture) *browser {
	t.Helper()
	path := chromium()
	if path == "" {
		testenv.Skipf(t, "no chromium on PATH (scripts/setup-chromium.sh installs it; or set AIRLOCK_CHROMIUM)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // the tests may run as root, where Chromium's sandbox refuses to start
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		// Chromium leaves its singleton directories in TMPDIR: one the
		// test removes.
		chromedp.Env("TMPDIR="+t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	base, _ := url.Parse(f.http.URL)
	b := &browser{t: t, ctx: ctx, base: base}
	// Start the browser (the first Run must not carry a timeout).
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[int]("1")); err != nil {
		testenv.Skipf(t, "chromium at %s does not start: %v", path, err)
	}
	if err := chromedp.Listen(ctx, b.event); err != nil {
		t.Fatal(err)
	}
	return b
}

// event records what the page must never do. It runs on chromedp's
// event loop, so it only appends; a dialog is closed from a goroutine.
func (b *browser) event(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch ev := ev.(type) {
	case *page.EventJavascriptDialogOpening:
		b.dialogs = append(b.dialogs, ev.Message)
		go func() {
			_, _ = chromedp.Call(b.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}()
	case *runtime.EventExceptionThrown:
		b.errors = append(b.errors, "exception: "+ev.ExceptionDetails.Text)
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
			b.errors = append(b.errors, fmt.Sprintf("console.%s", ev.Type))
		}
	case *log.EventEntryAdded:
		// CSP violations and failed loads are logged here.
		if ev.Entry.Level == log.EntryLevelError || ev.Entry.Level == log.EntryLevelWarning {
			b.errors = append(b.errors, "log: "+ev.Entry.Text+" "+ev.Entry.URL)
		}
	case *network.EventRequestWillBeSent:
		u, err := url.Parse(ev.Request.URL)
		if err != nil || u.Scheme != b.base.Scheme || u.Host != b.base.Host {
			b.requests = append(b.requests, ev.Request.URL[:min(len(ev.Request.URL), 200)])
		}
	}
}

// run runs actions with a bounded wait.
func (b *browser) run(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`location.href + ": " + document.body.innerText.slice(0, 500)`))
		b.mu.Lock()
		defer b.mu.Unlock()
		b.t.Fatalf("browser: %v; at %s (dialogs %q, errors %q, foreign requests %q)", err, text, b.dialogs, b.errors, b.requests)
	}
}

func (b *browser) eval(js string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", js, err)
	}
	return v
}

func (b *browser) open(path string) {
	b.t.Helper()
	b.run(chromedp.Navigate(b.base.String()+path), chromedp.WaitReady(chromedp.CSS("main")))
}

func (b *browser) signIn(key string) {
	b.t.Helper()
	b.open("/console/")
	b.run(chromedp.SendKeys(chromedp.ID("key"), key), chromedp.Submit(chromedp.ID("key")), chromedp.WaitReady(chromedp.ID("pending")))
}

// clean checks the page ran nothing it was not meant to: no dialog, no
// error or CSP report, the sentinel unset, no foreign request, and no
// element or attribute that job content could have injected.
func (b *browser) clean(where string) {
	b.t.Helper()
	if got := b.eval(`String(typeof window.__pwned)`); got != "undefined" {
		b.t.Errorf("%s: the sentinel is set: %s", where, got)
	}
	// The console's own: one script (console.js), one style sheet.
	if got := b.eval(`[document.scripts.length, document.querySelectorAll('link[rel=stylesheet]').length, document.querySelectorAll('style,img,iframe,object,embed,base,meta[http-equiv],link:not([rel=stylesheet]):not([rel=icon]),[style],[onerror],[onload],[onclick],[onmouseover],[onfocus],a[href^="javascript:"],a[href^="data:"]').length].join()`); got != "1,1,0" {
		b.t.Errorf("%s: scripts, style sheets, injected elements = %s", where, got)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.dialogs) > 0 || len(b.errors) > 0 || len(b.requests) > 0 {
		b.t.Errorf("%s: dialogs %q, errors %q, foreign requests %q", where, b.dialogs, b.errors, b.requests)
	}
}

// screenshot saves the page to the test's artefact directory
// ($AIRLOCK_ARTEFACTS, else a temporary one).
func (b *browser) screenshot(name string) []byte {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("AIRLOCK_ARTEFACTS")
	if dir == "" {
		dir = b.t.TempDir()
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s", p)
	return png
}

// commandsRun skips the test where no tier runs command jobs.
func commandsRun(t *testing.T, f *fixture) {
	t.Helper()
	r := f.do("POST", "/v1/explain", keyA, commandJob([]string{"true"}, nil))
	if r.status != 200 || strings.Contains(string(r.body), `"error"`) {
		testenv.Skipf(t, "no tier runs command jobs here: %s", r.body)
	}
}

// TestConsoleBrowserFlow is the whole flow in a real browser: an agent
// asks approval for a command job; it appears in the open list without a
// reload; the approver reads its argv and files and approves with a
// reason; the agent runs it with the token; a changed job is refused as
// stale, and the console shows it so; the trail names the approver and
// the reason.
func TestConsoleBrowserFlow(t *testing.T) {
	f := newFixture(t, consoleConfig)
	commandsRun(t, f)
	b := newBrowser(t, f)
	b.signIn(keyApprover)
	b.clean("empty list")
	// The list is open; the marker proves the page is not reloaded.
	b.eval(`window.__sameDocument = "yes"; ""`)
	b.run(chromedp.WaitReady(chromedp.CSS(`html[data-live="open"]`)))

	job := commandJob([]string{"cat", "notes.txt", "extra arg"}, map[string]string{"notes.txt": "hello from the job\n", "data.bin": "\x00\x01\x02binary"})
	d := f.requestApproval(keyA, job)
	link := fmt.Sprintf(`a[href="/console/approvals/%s"]`, d)
	b.run(chromedp.WaitVisible(chromedp.CSS(link)))
	if got := b.eval(`String(window.__sameDocument)`); got != "yes" {
		t.Errorf("the page reloaded instead of updating: %s", got)
	}
	b.screenshot("console-list.png")
	b.clean("list")

	b.run(chromedp.Click(chromedp.CSS(link)), chromedp.WaitVisible(chromedp.ID("reason")))
	// On a phone's width nothing needs scrolling sideways.
	b.run(chromedp.EmulateViewport(390, 844))
	if got := b.eval(`String(document.documentElement.scrollWidth <= window.innerWidth)`); got != "true" {
		t.Errorf("the detail page overflows a phone's width: %s", b.eval(`String(document.documentElement.scrollWidth)`))
	}
	b.screenshot("console-detail-phone.png")
	b.run(chromedp.EmulateViewport(1280, 900))
	// Keyboard: the reason field and both buttons are reached with Tab.
	if got := b.eval(`[...document.querySelectorAll("#reason, button[name=decision]")].map(e => e.tabIndex).join()`); got != "0,0,0" {
		t.Errorf("form controls' tab order: %s", got)
	}
	if got := b.eval(`[...document.querySelectorAll("table.argv tbody tr td:nth-child(2) .val")].map(e => e.textContent).join("|")`); got != "cat|notes.txt|extra arg" {
		t.Errorf("argv rows: %q", got)
	}
	files := b.eval(`[...document.querySelectorAll("article.file")].map(e => e.textContent.replace(/\s+/g, " ")).join("|")`)
	for _, want := range []string{"notes.txt", "19 bytes", "hello from the job", "data.bin", "binary, shown as hex", "00 01 02 62"} {
		if !strings.Contains(files, want) {
			t.Errorf("files lack %q: %s", want, files)
		}
	}
	png := b.screenshot("console-detail.png")
	if p := os.Getenv("AIRLOCK_DOCS_SCREENSHOT"); p != "" {
		// How docs/console.png is made.
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b.clean("detail")

	b.run(chromedp.SendKeys(chromedp.ID("reason"), "reads its own notes file"),
		chromedp.Click(chromedp.CSS(`button[value="approve"]`)),
		chromedp.WaitVisible(chromedp.CSS("section.decision")))
	if got := b.eval(`document.querySelector("h1").textContent`); !strings.HasPrefix(got, "Approved") {
		t.Errorf("after approving: %q", got)
	}

	st, token := f.decision(keyA, d)
	if st != "approved" || token == "" {
		t.Fatalf("agent sees %s", st)
	}
	r := f.do("POST", "/v1/run", keyA, job, server.ApprovalHeader, token)
	res := r.result(t)
	if r.status != 200 || res.Stdout != "hello from the job\n" {
		// cat fails on the missing "extra arg"; its stdout is still the notes.
		if !strings.Contains(res.Stdout, "hello from the job") {
			t.Fatalf("run: %d %s", r.status, r.body)
		}
	}
	changed := commandJob([]string{"cat", "/etc/passwd"}, job.Files)
	if r := f.do("POST", "/v1/run", keyA, changed, server.ApprovalHeader, token); r.status != 403 || !strings.Contains(string(r.body), approve.Stale) {
		t.Fatalf("changed job: %d %s", r.status, r.body)
	}
	b.run(chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("tr.stale")))
	if got := b.eval(`document.querySelector("tr.stale").textContent`); !strings.Contains(got, "stale") {
		t.Errorf("stale row: %q", got)
	}
	b.clean("decided")

	var decided, ran bool
	for _, rec := range f.auditRecords() {
		if rec.Digest != d {
			continue
		}
		ok := rec.Reason == "reads its own notes file" && strings.HasPrefix(rec.Approver, "approver:")
		decided = decided || rec.Request == "approval" && ok
		ran = ran || rec.Request == "run" && ok
	}
	if !decided || !ran {
		t.Errorf("the trail lacks the approver and reason on the decision (%v) or the run (%v)", decided, ran)
	}
}

// TestConsoleBrowserHostile fills every field a job writes with markup,
// script, URLs, CSS and bidirectional overrides, and an argument near
// the largest Linux takes; the console must show it all as text and run
// none of it.
func TestConsoleBrowserHostile(t *testing.T) {
	f := newFixture(t, consoleConfig)
	commandsRun(t, f)
	b := newBrowser(t, f)
	hostile := []string{
		`<script>window.__pwned=1</script>`,
		`"><img src=x onerror="window.__pwned=2">`,
		`' onmouseover='window.__pwned=3' x='`,
		`javascript:window.__pwned=4`,
		`data:text/html,<script>window.__pwned=5</script>`,
		`<a href="javascript:window.__pwned=6">click</a>`,
		`<style>body{background:url(http://evil.example/css)}</style>`,
		`</textarea><form action="http://evil.example/"><button>x</button></form>`,
		`<svg onload="window.__pwned=7"></svg>`,
		`<iframe src="http://evil.example/"></iframe>`,
		"evil\u202etxt.exe",
		"zero\u200bwidth\u2066isolate\u2069",
		"bell\x07and\x1b[31mescape",
	}
	big := strings.Repeat("A", 128<<10-1) // MAX_ARG_STRLEN, with its NUL
	files := map[string]string{}
	var script strings.Builder
	for i, h := range hostile {
		files[fmt.Sprintf("f%d-%s", i, strings.NewReplacer("/", "_").Replace(h))] = h + "\n"
		script.WriteString(h + "\n")
	}
	files["out.txt"] = script.String()
	shown := commandJob(append([]string{"cat"}, append(hostile, big)...), files)
	dShown := f.requestApproval(keyA, shown)
	runs := commandJob([]string{"cat", "out.txt"}, map[string]string{"out.txt": script.String()})
	dRun := f.requestApproval(keyA, runs)

	b.signIn(keyApprover)
	b.clean("list")
	b.open("/console/approvals/" + string(dShown))
	b.clean("hostile detail")
	text := b.eval(`document.body.innerText`)
	for _, want := range []string{`<script>window.__pwned=1</script>`, `javascript:window.__pwned=4`, `evil\u202etxt.exe`, `zero\u200bwidth\u2066isolate\u2069`, `bell\x07and\x1b[31mescape`, "more bytes not shown"} {
		if !strings.Contains(text, want) {
			t.Errorf("detail does not show %q as text", want)
		}
	}
	if !strings.Contains(text, "hidden, control or bidirectional") {
		t.Error("no warning for the hidden characters")
	}
	if strings.Contains(text, "\u202e") || strings.Contains(text, "\u200b") {
		t.Error("a raw bidirectional or zero-width character reached the page")
	}
	if n := len(b.eval(`document.documentElement.outerHTML`)); n > 512<<10 {
		t.Errorf("the page is %d bytes: the megabyte argument was not truncated", n)
	}
	b.screenshot("console-hostile.png")
	reason := `<script>window.__pwned=8</script> "><img src=x onerror=window.__pwned=9> ` + "\u202e" + `gnp.exe`
	b.run(chromedp.SendKeys(chromedp.ID("reason"), "no"), chromedp.Click(chromedp.CSS(`button[value="deny"]`)), chromedp.WaitVisible(chromedp.CSS("section.decision")))
	b.clean("denied")

	b.open("/console/approvals/" + string(dRun))
	b.run(chromedp.SetValue(chromedp.ID("reason"), reason), chromedp.Click(chromedp.CSS(`button[value="approve"]`)), chromedp.WaitVisible(chromedp.CSS("section.decision")))
	b.clean("approved with a hostile reason")
	if text := b.eval(`document.querySelector("section.decision").innerText`); !strings.Contains(text, `<script>window.__pwned=8</script>`) || !strings.Contains(text, `\u202egnp.exe`) {
		t.Errorf("the reason is not shown as escaped text: %q", text)
	}
	_, token := f.decision(keyA, dRun)
	if r := f.do("POST", "/v1/run", keyA, runs, server.ApprovalHeader, token); r.status != 200 {
		t.Fatalf("run: %d %s", r.status, r.body)
	}
	b.open("/console/audit")
	b.clean("audit")
	b.screenshot("console-audit.png")
	b.run(chromedp.Click(chromedp.CSS(`tr:not(.stale) td a[href^="/console/runs/"]`)), chromedp.WaitReady(chromedp.CSS("dl.facts")))
	// The first row is the newest record: the run.
	text = b.eval(`document.body.innerText`)
	for _, want := range []string{`<script>window.__pwned=1</script>`, `evil\u202etxt.exe`, "Replay"} {
		if !strings.Contains(text, want) {
			t.Errorf("run page does not show %q as text", want)
		}
	}
	b.clean("run")
}

// TestConsoleBrowserCrossSite: a page on another origin that posts a
// decision form to the console, in the browser where the approver is
// signed in, is refused, and the job stays pending.
func TestConsoleBrowserCrossSite(t *testing.T) {
	f := newFixture(t, consoleConfig)
	d := f.requestApproval(keyA, starlarkJob("1"))
	b := newBrowser(t, f)
	b.signIn(keyApprover)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s/console/approvals/%s">
<input name="decision" value="approve"><input name="reason" value="cross-site"><input name="csrf" value="guess"></form>
<script>document.getElementById("f").submit()</script>`, f.http.URL, d)
	}))
	defer evil.Close()
	// Another origin: the console's host by another name.
	evilURL := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)
	b.run(chromedp.Navigate(evilURL), chromedp.WaitReady(chromedp.CSS("main")))
	if got := b.eval(`location.pathname + " " + document.body.innerText`); !strings.Contains(got, "Refused") {
		t.Errorf("the cross-site post was not refused: %s", got)
	}
	if st, _ := f.decision(keyA, d); st != "pending" {
		t.Errorf("a cross-site post decided the job: %s", st)
	}
}

// TestConsoleBrowserAuditFiles: in the browser, the audit page lists the
// approver's tenants' records from the audit files a page at a time; a
// record's page gives the FILE:N of its line, and its download link
// fetches that line as written.
func TestConsoleBrowserAuditFiles(t *testing.T) {
	dir := t.TempDir()
	f := newFileFixture(t, dir, 8<<10)
	for i := range 55 {
		if r := f.do("POST", "/v1/run", keyA, xJob(i)); r.status != 200 {
			t.Fatalf("run %d: %d %s", i, r.status, r.body)
		}
		if i%5 == 0 {
			if r := f.do("POST", "/v1/run", keyB, xJob(1000+i)); r.status != 200 {
				t.Fatalf("run b %d: %d %s", i, r.status, r.body)
			}
		}
	}
	b := newBrowser(t, f)
	b.signIn(keyApprover)
	b.open("/console/audit")
	tenants := `[...document.querySelectorAll("td[data-label=Tenant]")].map(e => e.textContent).join("")`
	if got := b.eval(tenants); got != strings.Repeat("a", 50) {
		t.Errorf("the first page lists tenants %q, want 50 of a's", got)
	}
	b.screenshot("console-audit-files.png")
	b.clean("audit, newest page")
	b.run(chromedp.Click(chromedp.ID("older")), chromedp.WaitVisible(chromedp.ID("newest")))
	if got := b.eval(tenants); got != "aaaaa" {
		t.Errorf("the older page lists tenants %q, want 5 of a's", got)
	}
	b.clean("audit, older page")
	// The oldest record: xJob(0), in the first (rotated) file.
	b.run(chromedp.Click(chromedp.CSS(`tbody tr:last-child a[href^="/console/records/"]`)), chromedp.WaitVisible(chromedp.ID("replay-ref")))
	ref := strings.TrimPrefix(b.eval(`document.getElementById("replay-ref").textContent`), "airlock replay ")
	i := strings.LastIndexByte(ref, ':')
	n, err := strconv.Atoi(ref[i+1:])
	files := trailFiles(t, dir)
	if err != nil || i < 0 || ref[:i] != files[0] {
		t.Fatalf("the replay reference %q is not a line of the oldest file %s", ref, files[0])
	}
	want := readLinesOf(t, files[0])[n-1]
	if rec, err := server.ParseRecord([]byte(want)); err != nil || rec.Tenant != "a" || fmt.Sprint(rec.Job.Input["x"]) != "0" {
		t.Errorf("%s is not the record of the first run: %v %s", ref, err, want)
	}
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`fetch(document.getElementById("record-download").href).then(r => r.text())`, chromedp.EvalAwaitPromise))
	if err != nil || got != want+"\n" {
		t.Errorf("the download fetched %q (%v), want line %d of %s: %q", got, err, n, files[0], want)
	}
	b.clean("record")
}
