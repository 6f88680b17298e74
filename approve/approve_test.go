package approve_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

func netJob() airlock.Job {
	return airlock.Job{
		Kind:   airlock.KindCommand,
		Argv:   []string{"sh", "run.sh", "--to", "registry.example"},
		Files:  map[string]string{"run.sh": "curl -s https://registry.example/x\n", "lib/a.txt": "data"},
		Grants: airlock.Grants{Net: []airlock.NetRule{{Host: "registry.example"}}},
		Limits: airlock.Limits{WallMS: 1000},
	}
}

func signer(t *testing.T) *approve.Signer {
	t.Helper()
	s, err := approve.NewSigner(nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// digestFields are the job's fields the digest covers, each changed by a
// case of TestDigestCoversEveryField; Tier is not among them, since the
// tier the job is routed to is hashed instead. A field added to the job
// fails TestDigestKnowsEveryField until it is hashed and listed here (or
// is shown not to change what the job does).
var digestFields = []string{
	"Kind", "Code", "Module", "Entry", "Argv", "Stdin", "Input", "Files", "Collect", "Env", "Image",
	"Grants.FS.Read", "Grants.FS.At", "Grants.FS.Copy", "Grants.FS.ScratchMB",
	"Grants.Net.Host", "Grants.Net.Methods", "Grants.Net.Ports", "Grants.Net.Scheme", "Grants.Net.Paths",
	"Grants.Spawn", "Grants.Secrets", "Grants.Credentials.Env", "Grants.Credentials.Ref",
	"Limits.WallMS", "Limits.CPUMS", "Limits.MemoryMB", "Limits.OutputBytes", "Limits.Pids", "Limits.Files", "Limits.Steps",
	"Clock", "Seed", "Situation", "Lifecycle", "Session", "Account", "Tier",
}

// TestDigestKnowsEveryField: every field of a job, at every depth, is in
// digestFields.
func TestDigestKnowsEveryField(t *testing.T) {
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.Struct {
			typ = typ.Elem()
		}
		for f := range typ.Fields() {
			name := prefix + f.Name
			ft := f.Type
			for ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Time]() {
				walk(name+".", ft)
				continue
			}
			if !slices.Contains(digestFields, name) {
				t.Errorf("job field %s: not known to the digest (hash it, or say why not, and list it in digestFields)", name)
			}
		}
	}
	walk("", reflect.TypeFor[airlock.Job]())
}

func TestDigestCoversEveryField(t *testing.T) {
	base := netJob()
	d0 := approve.Of(&base, "process", "acme")
	if d0 != approve.Of(&base, "process", "acme") {
		t.Fatal("digest is not deterministic")
	}
	mutations := map[string]func(j *airlock.Job){
		"argument":      func(j *airlock.Job) { j.Argv[3] = "evil.example" },
		"argv boundary": func(j *airlock.Job) { j.Argv = []string{"sh", "run.sh --to", "registry.example"} },
		"file content":  func(j *airlock.Job) { j.Files["run.sh"] = "curl -s https://evil.example/x\n" },
		"file name":     func(j *airlock.Job) { j.Files["lib/b.txt"] = j.Files["lib/a.txt"]; delete(j.Files, "lib/a.txt") },
		"extra file":    func(j *airlock.Job) { j.Files["x"] = "" },
		"stdin":         func(j *airlock.Job) { j.Stdin = "y" },
		"code":          func(j *airlock.Job) { j.Code = "1" },
		"module":        func(j *airlock.Job) { j.Module = []byte{0} },
		"input":         func(j *airlock.Job) { j.Input = map[string]any{"a": int64(1)} },
		"net host":      func(j *airlock.Job) { j.Grants.Net[0].Host = "evil.example" },
		"net method":    func(j *airlock.Job) { j.Grants.Net[0].Methods = []string{"PUT"} },
		"spawn":         func(j *airlock.Job) { j.Grants.Spawn = true },
		"fs read":       func(j *airlock.Job) { j.Grants.FS.Read = []string{"/etc"} },
		"fs at": func(j *airlock.Job) {
			j.Grants.FS.Read, j.Grants.FS.At = []string{"/usr/share"}, map[string]string{"/usr/share": "/"}
		},
		"fs copy": func(j *airlock.Job) {
			j.Grants.FS.Read, j.Grants.FS.Copy = []string{"/usr/share"}, []string{"/usr/share"}
		},
		"secret value":  func(j *airlock.Job) { j.Grants.Secrets = map[string]string{"TOKEN": "b"} },
		"env":           func(j *airlock.Job) { j.Env = map[string]string{"MODE": "a"} },
		"image":         func(j *airlock.Job) { j.Image = "python" },
		"env or secret": func(j *airlock.Job) { j.Grants.Secrets = map[string]string{"MODE": "a"} },
		"limits":        func(j *airlock.Job) { j.Limits.WallMS = 2000 },
		"situation":     func(j *airlock.Job) { j.Situation = airlock.SituationInternal },
		"collect":       func(j *airlock.Job) { j.Collect = []string{"out/*"} },
		"clock":         func(j *airlock.Job) { j.Clock = time.Date(2031, 6, 1, 0, 0, 0, 0, time.UTC) },
		"seed":          func(j *airlock.Job) { j.Seed = 99 },
	}
	for name, mutate := range mutations {
		j := netJob()
		mutate(&j)
		if approve.Of(&j, "process", "acme") == d0 {
			t.Errorf("changing the %s does not change the digest", name)
		}
	}
	// Where a grant appears counts, not only whether it is placed.
	a, b := netJob(), netJob()
	a.Grants.FS.Read, a.Grants.FS.At = []string{"/usr/share"}, map[string]string{"/usr/share": "/"}
	b.Grants.FS.Read, b.Grants.FS.At = []string{"/usr/share"}, map[string]string{"/usr/share": "/data"}
	if approve.Of(&a, "process", "acme") == approve.Of(&b, "process", "acme") {
		t.Error("changing a grant's guest path does not change the digest")
	}
	// The environment's value counts, and so does where a variable is.
	a, b = netJob(), netJob()
	a.Env, b.Env = map[string]string{"MODE": "a"}, map[string]string{"MODE": "b"}
	if approve.Of(&a, "process", "acme") == approve.Of(&b, "process", "acme") {
		t.Error("changing an env value does not change the digest")
	}
	b.Env, b.Grants.Secrets = nil, map[string]string{"MODE": "a"}
	if approve.Of(&a, "process", "acme") == approve.Of(&b, "process", "acme") {
		t.Error("moving a variable from env to grants.secrets does not change the digest")
	}
	// A binary file: one changed byte anywhere is another job.
	bin := make([]byte, 256)
	for i := range bin {
		bin[i] = byte(i)
	}
	a, b = netJob(), netJob()
	a.Files["tool.bin"] = string(bin)
	bin[200] ^= 1
	b.Files["tool.bin"] = string(bin)
	if approve.Of(&a, "process", "acme") == approve.Of(&b, "process", "acme") {
		t.Error("changing one byte of a binary file does not change the digest")
	}
	a.Collect, b.Collect = []string{"a"}, []string{"b"}
	b.Files = a.Files
	if approve.Of(&a, "process", "acme") == approve.Of(&b, "process", "acme") {
		t.Error("changing a collect pattern does not change the digest")
	}
	if approve.Of(&base, "gvisor", "acme") == d0 {
		t.Error("the tier is not in the digest")
	}
	if approve.Of(&base, "process", "other") == d0 {
		t.Error("the tenant is not in the digest")
	}
}

func TestTokenChecks(t *testing.T) {
	s := signer(t)
	job := netJob()
	d := approve.Of(&job, "process", "acme")
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tok := s.Issue(approve.Claims{Digest: d, Tenant: "acme", Expires: now.Add(time.Minute)})
	if _, err := s.Check(tok, d, "acme", now); err != nil {
		t.Fatalf("a valid token is refused: %v", err)
	}
	changed := netJob()
	changed.Argv[3] = "evil.example"
	other := signer(t)
	cases := map[string]struct {
		token  string
		digest approve.Digest
		tenant string
		at     time.Time
		want   string
	}{
		"changed argument":   {tok, approve.Of(&changed, "process", "acme"), "acme", now, "differs"},
		"expired":            {tok, d, "acme", now.Add(time.Minute), "expired"},
		"other tenant":       {tok, d, "other", now, "another tenant"},
		"other server's key": {other.Issue(approve.Claims{Digest: d, Tenant: "acme", Expires: now.Add(time.Hour)}), d, "acme", now, "not signed"},
		"tampered claims":    {tamper(tok), d, "acme", now, "not signed"},
		"garbage":            {"not-a-token", d, "acme", now, "malformed"},
		// The decoder alone would take these spellings of the same token,
		// each a token not yet used.
		"line break":      {tok[:5] + "\n" + tok[5:], d, "acme", now, "malformed"},
		"carriage return": {tok + "\r", d, "acme", now, "malformed"},
		"padding bits":    {respell(tok), d, "acme", now, "malformed"},
		"empty":           {"", d, "acme", now, "malformed"},
	}
	for name, c := range cases {
		_, err := s.Check(c.token, c.digest, c.tenant, c.at)
		if err == nil || !approve.IsStale(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an approval_stale refusal mentioning %q", name, err, c.want)
		}
		if airlock.KindOf(err) != airlock.ErrNotAdmitted {
			t.Errorf("%s: error kind %s, want not_admitted", name, airlock.KindOf(err))
		}
	}
}

// respell changes the lowest bit of the token's last character, which
// only pads the MAC's last byte (32 bytes: 43 characters, the last holding
// 4 bits and 2 of padding).
func respell(tok string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, tok[len(tok)-1])
	return tok[:len(tok)-1] + string(alphabet[i^1])
}

// tamper rewrites the claims to another tenant, keeping the signature.
func tamper(tok string) string {
	i := strings.IndexByte(tok, '.')
	return "eyJkaWdlc3QiOiIiLCJ0ZW5hbnQiOiJldmlsIn0" + tok[i:]
}

func place(t *testing.T, job airlock.Job) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range job.Files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestPlacedFiles(t *testing.T) {
	job := netJob()
	want := approve.Of(&job, "process", "acme")
	check := approve.PlacedCheck(job, "process", "acme", want)
	ctx := airlock.WithPlacedCheck(context.Background(), check)

	t.Run("unchanged", func(t *testing.T) {
		dir := place(t, job)
		if err := airlock.CheckPlaced(ctx, dir); err != nil {
			t.Fatalf("placed files as approved are refused: %v", err)
		}
	})
	t.Run("content swapped after placing", func(t *testing.T) {
		dir := place(t, job)
		os.WriteFile(filepath.Join(dir, "run.sh"), []byte("curl https://evil.example\n"), 0o644)
		expectStale(t, airlock.CheckPlaced(ctx, dir), "differ")
	})
	t.Run("file swapped for a symlink", func(t *testing.T) {
		dir := place(t, job)
		secret := filepath.Join(t.TempDir(), "secret")
		os.WriteFile(secret, []byte(job.Files["run.sh"]), 0o644) // same bytes: only the link differs
		os.Remove(filepath.Join(dir, "run.sh"))
		if err := os.Symlink(secret, filepath.Join(dir, "run.sh")); err != nil {
			t.Fatal(err)
		}
		expectStale(t, airlock.CheckPlaced(ctx, dir), "symbolic link")
	})
	t.Run("symlink target swapped", func(t *testing.T) {
		dir := place(t, job)
		elsewhere := t.TempDir()
		os.WriteFile(filepath.Join(elsewhere, "a.txt"), []byte("data"), 0o644)
		os.RemoveAll(filepath.Join(dir, "lib"))
		if err := os.Symlink(elsewhere, filepath.Join(dir, "lib")); err != nil {
			t.Fatal(err)
		}
		expectStale(t, airlock.CheckPlaced(ctx, dir), "symbolic link")
	})
	t.Run("file replaced by a fifo", func(t *testing.T) {
		dir := place(t, job)
		os.Remove(filepath.Join(dir, "lib", "a.txt"))
		if err := unix.Mkfifo(filepath.Join(dir, "lib", "a.txt"), 0o644); err != nil {
			testenv.Skipf(t, "cannot make a fifo to swap in: %v", err)
		}
		expectStale(t, airlock.CheckPlaced(ctx, dir), "not a regular file")
	})
	t.Run("file missing", func(t *testing.T) {
		dir := place(t, job)
		os.Remove(filepath.Join(dir, "run.sh"))
		expectStale(t, airlock.CheckPlaced(ctx, dir), "run.sh")
	})
	if err := airlock.CheckPlaced(context.Background(), t.TempDir()); err != nil {
		t.Errorf("a context without a check refuses: %v", err)
	}
}

func expectStale(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || !approve.IsStale(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want approval_stale mentioning %q", err, want)
	}
}

func TestPolicy(t *testing.T) {
	p := approve.DefaultPolicy()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	j := netJob()
	if p.Requires(&j, "process") != "network" {
		t.Error("a command with a net grant does not need approval")
	}
	// A module's or a script's requests carry data out as a command's do.
	for _, k := range []airlock.Job{
		{Kind: airlock.KindWasm, Module: []byte("\x00asm\x01\x00\x00\x00"), Grants: j.Grants},
		{Kind: airlock.KindStarlark, Code: "x = 1", Grants: j.Grants},
	} {
		if r := p.Requires(&k, string(k.Kind)); r != "network" {
			t.Errorf("a %s job with a net grant needs no approval (%q)", k.Kind, r)
		}
	}
	j.Grants.Net = nil
	if r := p.Requires(&j, "process"); r != "" {
		t.Errorf("a command without grants needs approval (%s)", r)
	}
	e := airlock.Job{Kind: airlock.KindExpr, Code: "1", Grants: airlock.Grants{Secrets: map[string]string{"K": "v"}}}
	if p.Requires(&e, "expr") != "credentials" {
		t.Error("a job with credentials does not need approval")
	}
	ref := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"gh"}, Situation: airlock.SituationCredentials,
		Grants: airlock.Grants{Credentials: []airlock.Credential{{Env: "GITHUB_TOKEN", Ref: "github-readonly"}}}}
	if p.Requires(&ref, "account") != "credentials" {
		t.Error("a job with credential references does not need approval")
	}
	bad := approve.Policy{Rules: []approve.Rule{{Name: "x", Kinds: []airlock.Kind{"shell"}}}}
	if bad.Validate() == nil {
		t.Error("an unknown kind is accepted")
	}
}
