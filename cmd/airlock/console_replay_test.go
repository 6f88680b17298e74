package main

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/server"
)

// TestConsoleReplay is the console's replay reference end to end: a run
// through `airlock serve`'s handler, its record found on the console's
// audit page after the file was rotated, and both the FILE:N the record's
// page names and the record it downloads replayed by `airlock replay`.
func TestConsoleReplay(t *testing.T) {
	const approverKey = "ak_cli-test-approver-0123456789abcdef012345"
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "serve.yaml")
	cfg := fmt.Sprintf("audit: audit.jsonl\naudit_rotation:\n  max_bytes: 3000\ntenants:\n  - name: t\n    key_sha256: %s\n    approver_sha256: [%s]\n",
		server.HashKey(testKey), server.HashKey(approverKey))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := server.LoadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newServer(c, &tierFlags{}, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer func() {
		hs.Close()
		srv.Close()
	}()
	// The run to replay, then enough others to rotate its file aside.
	jobs := []string{`{"kind":"starlark","code":"result = [random.random(), time.now().unix]"}`}
	for i := range 8 {
		jobs = append(jobs, fmt.Sprintf(`{"kind":"expr","code":"x","input":{"x":%d}}`, i))
	}
	for _, job := range jobs {
		req, _ := http.NewRequest("POST", hs.URL+"/v1/run", strings.NewReader(job))
		req.Header.Set("Authorization", "Bearer "+testKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", job, resp.StatusCode)
		}
	}
	if rotated, _ := filepath.Glob(filepath.Join(dir, "audit.jsonl.*")); len(rotated) == 0 {
		t.Fatal("the audit file was not rotated")
	}

	// An approver signs in to the console as a browser would.
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar}
	get := func(path string) string {
		t.Helper()
		resp, err := client.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(get("/console/"))
	if m == nil {
		t.Fatal("no sign-in form")
	}
	req, _ := http.NewRequestWithContext(context.Background(), "POST", hs.URL+"/console/signin",
		strings.NewReader(url.Values{"csrf": {m[1]}, "key": {approverKey}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", hs.URL)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	// The starlark run is the oldest record on the audit page.
	links := regexp.MustCompile(`href="(/console/records/\d+)"`).FindAllStringSubmatch(get("/console/audit?tier=starlark"), -1)
	if len(links) != 1 {
		t.Fatalf("the audit page lists %d starlark records", len(links))
	}
	page := get(links[0][1])
	ref := regexp.MustCompile(`<pre class="cmd" id="replay-ref">airlock replay ([^<]+)</pre>`).FindStringSubmatch(page)
	if ref == nil {
		t.Fatalf("no replay reference on the record's page: %s", page)
	}
	spec := html.UnescapeString(ref[1])
	if !strings.HasPrefix(spec, filepath.Join(dir, "audit.jsonl.")) {
		t.Errorf("the reference %s is not in the rotated file", spec)
	}
	if _, errOut, code := run(t, "", "replay", spec); code != exitOK || !strings.Contains(errOut, "replay matches on starlark") {
		t.Errorf("airlock replay %s: %d %s", spec, code, errOut)
	}

	dl := regexp.MustCompile(`<a href="([^"]+)" id="record-download" download>`).FindStringSubmatch(page)
	if dl == nil {
		t.Fatalf("no download link on the record's page: %s", page)
	}
	file := filepath.Join(t.TempDir(), "record.jsonl")
	if err := os.WriteFile(file, []byte(get(html.UnescapeString(dl[1]))), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run(t, "", "replay", file); code != exitOK || !strings.Contains(errOut, "replay matches on starlark") {
		t.Errorf("airlock replay of the downloaded record: %d %s", code, errOut)
	}
}
