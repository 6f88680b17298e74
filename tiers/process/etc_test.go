package process

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// etcScript prints what the tests check of a container's /etc; the last
// line is the result of an attempt to write there.
const etcScript = `head -1 /etc/passwd; test -s /etc/ld.so.cache && echo ld.so.cache; ls /etc/ssl/certs | grep -c . ; (echo x > /etc/airlock-probe) 2>/dev/null && echo writable || echo read-only`

// TestEtcTemplate: containers get /etc from the tier's template — the
// synthesised passwd, the host's loader cache and certificates, read-only —
// and the template is rebuilt when /etc changes; a grant under /etc makes
// the container build its own /etc; nothing of the templates is left after
// Close.
func TestEtcTemplate(t *testing.T) {
	cfg := testConfig(t)
	// Changes to this directory stand for changes to /etc.
	watch := t.TempDir()
	tier := newTestTier(t, bothTiers[0], cfg, withEtcWatch(watch))
	check := func(job string) {
		t.Helper()
		res, err := tier.Run(context.Background(), cmdJob("sh", "-c", etcScript))
		if err != nil {
			t.Fatalf("%s: %v\n%s", job, err, res.Stderr)
		}
		lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		if len(lines) != 4 || !strings.HasPrefix(lines[0], "root:x:0:0:") || lines[1] != "ld.so.cache" || lines[2] == "0" || lines[3] != "read-only" {
			t.Fatalf("%s: /etc as seen in the sandbox:\n%s\n%s", job, res.Stdout, res.Stderr)
		}
	}
	// The template's mount point, as the host sees it: one directory.
	template := func() string {
		t.Helper()
		var names []string
		entries, _ := os.ReadDir(cfg.baseDir)
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), "-etc") {
				names = append(names, e.Name())
			}
		}
		if len(names) != 1 {
			t.Fatalf("templates under the base directory: %v, want one", names)
		}
		return names[0]
	}
	check("first job")
	first := template()
	if m := leftoverMounts(cfg.baseDir); len(m) > 0 {
		t.Fatalf("the template is mounted in the host's namespace: %v", m)
	}
	check("second job")
	if now := template(); now != first {
		t.Fatalf("the template was rebuilt without a change: %s, then %s", first, now)
	}

	// As if a file in /etc had been replaced. (The times compared have a
	// clock tick's resolution: wait for the next one.)
	time.Sleep(20 * time.Millisecond)
	if err := os.WriteFile(filepath.Join(watch, "new"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	check("after a change")
	if now := template(); now == first {
		t.Fatalf("the template was not rebuilt after /etc changed (%s)", now)
	}

	// A grant under /etc: the stage builds /etc itself, with the grant.
	job := cmdJob("sh", "-c", "ls /etc/ssl/certs | grep -c . && head -1 /etc/passwd")
	job.Grants.FS.Read = []string{"/etc/ssl/certs"}
	res, err := tier.Run(context.Background(), job)
	if err != nil || res.ExitCode != 0 || !strings.Contains(res.Stdout, "root:x:0:0:") {
		t.Fatalf("a grant under /etc: %v\n%s\n%s", err, res.Stdout, res.Stderr)
	}
	assertClean(t, tier, cfg)
	if entries := sandboxLeftovers(cfg.baseDir); len(entries) > 0 {
		t.Fatalf("left in the base directory: %v", entries)
	}
}
