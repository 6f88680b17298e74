package process

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	tier := newTestTier(t, bothTiers[0], cfg)
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
	check("first job")
	first := tier.etc.dir
	if first == "" || filepath.Dir(first) != cfg.baseDir {
		t.Fatalf("no template under the base directory (%q, last error %v)", first, tier.etc.err)
	}
	check("second job")
	if tier.etc.dir != first {
		t.Fatalf("the template was rebuilt without a change: %s, then %s", first, tier.etc.dir)
	}

	// As if /etc had changed since the template was built.
	root, err := os.Stat("/")
	if err != nil {
		t.Fatal(err)
	}
	tier.etc.mu.Lock()
	tier.etc.etc = root
	tier.etc.mu.Unlock()
	check("after a change")
	if tier.etc.dir == first || tier.etc.dir == "" {
		t.Fatalf("the template was not rebuilt after /etc changed (%q)", tier.etc.dir)
	}
	if _, err := os.Stat(first); !os.IsNotExist(err) {
		t.Fatalf("the old template %s is still there: %v", first, err)
	}

	// A grant under /etc: the stage builds /etc itself, with the grant.
	job := cmdJob("sh", "-c", "ls /etc/ssl/certs | grep -c . && head -1 /etc/passwd")
	job.Grants.FS.Read = []string{"/etc/ssl/certs"}
	res, err := tier.Run(context.Background(), job)
	if err != nil || res.ExitCode != 0 || !strings.Contains(res.Stdout, "root:x:0:0:") {
		t.Fatalf("a grant under /etc: %v\n%s\n%s", err, res.Stdout, res.Stderr)
	}
	assertClean(t, tier, cfg)
	if entries, _ := os.ReadDir(cfg.baseDir); len(entries) > 0 {
		t.Fatalf("left in the base directory: %v", entries)
	}
}
