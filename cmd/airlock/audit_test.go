package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// auditTrail runs n expressions through a server whose audit file rotates
// every couple of records, and returns the files oldest first.
func auditTrail(t *testing.T, n int) []string {
	t.Helper()
	var jobs []string
	for i := range n {
		jobs = append(jobs, fmt.Sprintf(`{"kind":"expr","code":"%d * 2"}`, i))
	}
	dir, srv := serveJobs(t, "audit_rotation:\n  max_bytes: 2048\n  keep: 100\n", jobs...)
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	audit := filepath.Join(dir, "audit.jsonl")
	rotated, _ := filepath.Glob(audit + ".*")
	slices.Sort(rotated)
	files := append(rotated, audit)
	if len(files) < 3 {
		t.Fatalf("%d files for %d records rotated at 2 KiB", len(files), n)
	}
	return files
}

// rewrite replaces a file's lines with what edit makes of them.
func rewrite(t *testing.T, file string, edit func([]string) []string) {
	t.Helper()
	lines := edit(readLines(t, file))
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestAuditVerify(t *testing.T) {
	files := auditTrail(t, 12)
	out, errOut, code := run(t, "", append([]string{"audit", "verify"}, files...)...)
	if code != exitOK || !strings.HasPrefix(out, fmt.Sprintf("intact: 12 records (seq 1 to 12) in %d files", len(files))) || strings.Count(out, "\n") != 1 {
		t.Fatalf("verify of an intact trail: %d %q %q", code, out, errOut)
	}
	// One file, one record: no plural s.
	one := filepath.Join(t.TempDir(), "one.jsonl")
	if err := os.WriteFile(one, []byte(readLines(t, files[0])[0]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _, code := run(t, "", "audit", "verify", one); code != exitOK || !strings.HasPrefix(out, "intact: 1 record (seq 1 to 1) in 1 file;") {
		t.Errorf("verify of one record in one file: %d %q", code, out)
	}
	broken := func(files []string, want string) {
		t.Helper()
		out, errOut, code := run(t, "", append([]string{"audit", "verify"}, files...)...)
		if code != exitFailed || !strings.Contains(errOut, want) || out != "" || strings.Count(errOut, "\n") != 1 {
			t.Errorf("verify: %d %q, want exit %d and %q", code, errOut, exitFailed, want)
		}
	}
	// Files out of order, a file left out.
	broken([]string{files[1], files[0]}, "out of order")
	broken(append([]string{files[0]}, files[2:]...), files[2]+":1: removed record")

	// A removed line: its successor is where the chain breaks.
	if len(readLines(t, files[1])) < 2 {
		t.Fatalf("%s holds fewer than 2 records", files[1])
	}
	clone := func() []string {
		dir := t.TempDir()
		var out []string
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			c := filepath.Join(dir, filepath.Base(f))
			if err := os.WriteFile(c, data, 0o600); err != nil {
				t.Fatal(err)
			}
			out = append(out, c)
		}
		return out
	}
	c := clone()
	rewrite(t, c[1], func(l []string) []string { return l[1:] })
	broken(c, c[1]+":1: removed record")

	// An edited line is named itself: the next record's prev no longer
	// matches its hash.
	c = clone()
	rewrite(t, c[1], func(l []string) []string {
		l[0] = strings.Replace(l[0], `"tenant":"t"`, `"tenant":"u"`, 1)
		return l
	})
	broken(c, c[1]+":1: edited record")

	// A line that is not JSON.
	c = clone()
	rewrite(t, c[1], func(l []string) []string { l[0] = l[0][:len(l[0])/2]; return l })
	broken(c, c[1]+":1: bad JSON")

	// Bad use and a missing file are invalid input.
	if _, errOut, code := run(t, "", "audit", "verify"); code != exitUsage || !strings.Contains(errOut, "airlock audit verify FILE") {
		t.Errorf("verify without files: %d %q", code, errOut)
	}
	if _, _, code := run(t, "", "audit", "verify", filepath.Join(t.TempDir(), "none")); code != exitUsage {
		t.Errorf("verify of a missing file: %d", code)
	}

	// The binary's own exit status, as a script sees it.
	cmd := exec.Command(os.Args[0], append([]string{"audit", "verify"}, c...)...)
	cmd.Env = append(os.Environ(), "AIRLOCK_CLI_CHILD=1")
	outb, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitFailed || !strings.Contains(string(outb), "bad JSON") {
		t.Errorf("airlock audit verify of a broken trail: %v %s", err, outb)
	}
}
