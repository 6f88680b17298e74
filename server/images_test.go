package server_test

import (
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testing/imagetest"
	"github.com/airlock-sandbox/airlock/internal/testing/syncbuf"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/internal/tierset"
	"github.com/airlock-sandbox/airlock/server"
)

// TestTenantImages: a server over a real image store binds a command job
// that names no image to the store's default, lets a tenant use only the
// images its configuration lists, and lists them in /v1/images.
func TestTenantImages(t *testing.T) {
	ctx := context.Background()
	st, err := image.Open(t.TempDir(), image.Options{Default: "tool"})
	if err != nil {
		t.Fatal(err)
	}
	tool, err := st.Import(ctx, "tool", imagetest.Layout(t, imagetest.Busybox(t, "airlock-tool"), nil))
	if err != nil {
		t.Fatal(err)
	}
	other, err := st.Import(ctx, "other", imagetest.Layout(t, imagetest.Busybox(t, "airlock-other"), nil))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Tenants[0].Images = []string{"tool"}
	cfg.Tenants[1].Tiers = append(cfg.Tenants[1].Tiers, "process")
	f := storeFixture(t, cfg, st, tierset.Options{})
	srv := f.srv

	var a, b []struct {
		Names   []string `json:"names"`
		Digest  string   `json:"digest"`
		Size    int64    `json:"size_bytes"`
		Default bool     `json:"default"`
	}
	f.do("GET", "/v1/images", keyA, nil).decode(t, &a)
	if len(a) != 1 || a[0].Digest != tool || strings.Join(a[0].Names, ",") != "tool" || !a[0].Default || a[0].Size <= 0 {
		t.Errorf("tenant a sees %+v, want only tool (%s), the default", a, tool)
	}
	f.do("GET", "/v1/images", keyB, nil).decode(t, &b)
	if len(b) != 2 {
		t.Errorf("tenant b (no list) sees %+v, want tool and other", b)
	}
	for _, in := range b {
		if in.Digest == image.Host {
			t.Error("the host view is listed although the store does not offer it")
		}
	}

	job := `{"kind":"command","argv":["cat","/etc/os-release"],"situation":"internal"}`
	r := f.do("POST", "/v1/run", keyA, job)
	if r.status == http.StatusForbidden && strings.Contains(string(r.body), "unavailable") {
		tiertest.Unavailable(t, "process", errorString(r.body))
	}
	res := r.result(t)
	if r.status != http.StatusOK || res.Err() != nil || strings.TrimSpace(res.Stdout) != "ID=airlock-tool" || res.Image != tool {
		t.Fatalf("default image: status %d, %+v", r.status, res)
	}

	// The audit record keeps the digest that ran, and replay runs that
	// image even after the name moved to another.
	var recs []server.Record
	f.do("GET", "/v1/audit", keyA, nil).decode(t, &recs)
	if len(recs) != 1 || recs[0].Image != tool || recs[0].Job == nil || recs[0].Job.Image != "tool" {
		t.Fatalf("audit: %+v", recs)
	}
	otherLayout := imagetest.Layout(t, imagetest.Busybox(t, "airlock-moved"), nil)
	if _, err := st.Import(ctx, "tool", otherLayout); err != nil {
		t.Fatal(err)
	}
	again, match, err := server.Replay(ctx, recs[0], srv.Router().Tiers())
	if err != nil || !match || strings.TrimSpace(again.Stdout) != "ID=airlock-tool" || again.Image != tool {
		t.Errorf("replay: match %v, err %v, %+v", match, err, again)
	}

	for _, ref := range []string{"other", other, image.Host} {
		r := f.do("POST", "/v1/run", keyA, `{"kind":"command","argv":["true"],"situation":"internal","image":"`+ref+`"}`)
		var e struct {
			Error struct{ Kind, Message string }
		}
		r.decode(t, &e)
		if r.status != http.StatusForbidden || e.Error.Kind != string(airlock.ErrNotAdmitted) || !strings.Contains(e.Error.Message, "may not use image "+ref) {
			t.Errorf("image %s for a tenant limited to tool: %d %s", ref, r.status, r.body)
		}
	}
	// A tenant with no list still gets no host view from a store that does
	// not offer it: the job is refused before it runs.
	r = f.do("POST", "/v1/run", keyB, `{"kind":"command","argv":["cat","/etc/hostname"],"situation":"internal","image":"host"}`)
	if r.status == http.StatusOK || !strings.Contains(string(r.body), "host view is not enabled") {
		t.Errorf("image host for a tenant without a list, host view not enabled: %d %s", r.status, r.body)
	}
	// /v1/explain refuses an image the store refuses as the run does.
	for ref, says := range map[string]string{"sha256:" + strings.Repeat("0", 64): "unknown digest", "nosuch": "unknown image name", image.Host: "host view is not enabled"} {
		job := `{"kind":"command","argv":["true"],"situation":"internal","image":"` + ref + `"}`
		x, r := f.do("POST", "/v1/explain", keyB, job), f.do("POST", "/v1/run", keyB, job)
		if x.status != r.status || x.status != http.StatusBadRequest || !strings.Contains(string(x.body), says) || !strings.Contains(string(r.body), says) {
			t.Errorf("image %s: explain %d %s, run %d %s", ref, x.status, x.body, r.status, r.body)
		}
	}
}

type errorString []byte

func (e errorString) Error() string { return string(e) }

// TestImageSettingsValidate: the configuration refuses image settings that
// would offer the host view without saying so, name no image at all, or
// list a registry that is not a host.
func TestImageSettingsValidate(t *testing.T) {
	for name, mutate := range map[string]func(*server.Config){
		"host default":         func(c *server.Config) { c.Images = &server.ImageSettings{Default: image.Host} },
		"tenant host":          func(c *server.Config) { c.Tenants[0].Images = []string{image.Host} },
		"negative cap":         func(c *server.Config) { c.Images = &server.ImageSettings{MaxMB: -1} },
		"empty tenant image":   func(c *server.Config) { c.Tenants[0].Images = []string{""} },
		"control in default":   func(c *server.Config) { c.Images = &server.ImageSettings{Default: "py\x1bthon"} },
		"host, not allowed 2":  func(c *server.Config) { c.Images = &server.ImageSettings{}; c.Tenants[1].Images = []string{image.Host} },
		"registry with scheme": func(c *server.Config) { c.Images = &server.ImageSettings{Registries: []string{"https://ghcr.io"}} },
		"registry with path":   func(c *server.Config) { c.Images = &server.ImageSettings{Registries: []string{"ghcr.io/team"}} },
		"empty registry":       func(c *server.Config) { c.Images = &server.ImageSettings{Registries: []string{""}} },
	} {
		c := testConfig()
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: a multi-line error: %q", name, err)
		}
	}
	c := testConfig()
	c.Images = &server.ImageSettings{AllowHost: true, Default: image.Host}
	c.Tenants[0].Images = []string{image.Host, "python"}
	c.Images.Registries = []string{"ghcr.io", "127.0.0.1:5000", "docker.io"}
	if err := c.Validate(); err != nil {
		t.Errorf("host allowed: %v", err)
	}
}

// TestImagesWarm: a tier's pool of a named image (tier_settings'
// image_pools) shows in /v1/images as the image's warm sandboxes per tier,
// and in /metrics under the image's digest with its name; an image
// without a pool shows none. When the name moves to a new image, the next
// job runs the new one and the pool follows.
func TestImagesWarm(t *testing.T) {
	ctx := context.Background()
	st, err := image.Open(t.TempDir(), image.Options{Default: "tool"})
	if err != nil {
		t.Fatal(err)
	}
	tool, err := st.Import(ctx, "tool", imagetest.Layout(t, imagetest.Busybox(t, "airlock-tool"), nil))
	if err != nil {
		t.Fatal(err)
	}
	other, err := st.Import(ctx, "other", imagetest.Layout(t, imagetest.Busybox(t, "airlock-other"), nil))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Tenants[1].Tiers = append(cfg.Tenants[1].Tiers, "process")
	f := storeFixture(t, cfg, st, tierset.Options{ProcessImagePools: map[string]int{"other": 1}})
	srv := f.srv
	if why := srv.Router().Unavailable("process"); why != nil {
		tiertest.Unavailable(t, "process", why)
	}
	var process airlock.Tier
	for _, tier := range srv.Router().Tiers() {
		if tier.Name() == "process" {
			process = tier
			wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			if err := tier.(airlock.Pooler).WaitWarm(wctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	var list []struct {
		Digest string         `json:"digest"`
		Warm   map[string]int `json:"warm"`
	}
	f.do("GET", "/v1/images", keyB, nil).decode(t, &list)
	seen := 0
	for _, in := range list {
		switch in.Digest {
		case other:
			seen++
			if len(in.Warm) != 1 || in.Warm["process"] != 1 {
				t.Errorf("other's warm sandboxes: %v, want process: 1", in.Warm)
			}
		case tool:
			seen++
			if len(in.Warm) != 0 {
				t.Errorf("tool has no pool, yet warm %v", in.Warm)
			}
		}
	}
	if seen != 2 {
		t.Errorf("/v1/images: %+v", list)
	}
	body := string(f.do("GET", "/metrics", "", nil).body)
	for _, want := range []string{
		`airlock_pool_image_capacity{tier="process",image="` + other + `"} 1`,
		`airlock_pool_image_name{tier="process",image="` + other + `",name="other"} 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}

	// The name moves to a new image while its pool is warm: the next job
	// naming it runs the new image, not a pooled sandbox of the old one,
	// and the pool follows the name.
	movedLayout := imagetest.Layout(t, imagetest.Busybox(t, "airlock-other-moved"), nil)
	moved, err := st.Import(ctx, "other", movedLayout)
	if err != nil || moved == other {
		t.Fatalf("moving other: %s, %v", moved, err)
	}
	r := f.do("POST", "/v1/run", keyB, `{"kind":"command","argv":["cat","/etc/os-release"],"situation":"internal","image":"other"}`)
	res := r.result(t)
	if r.status != http.StatusOK || strings.TrimSpace(res.Stdout) != "ID=airlock-other-moved" || res.Image != moved {
		t.Fatalf("image other after the move: status %d, %+v; want %s", r.status, res, moved)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := process.(airlock.Pooler).WaitWarm(wctx); err != nil {
		t.Fatal(err)
	}
	f.do("GET", "/v1/images", keyB, nil).decode(t, &list)
	for _, in := range list {
		if want := map[string]int{"process": 1}; in.Digest == moved && !maps.Equal(in.Warm, want) || in.Digest == other && len(in.Warm) != 0 {
			t.Errorf("after the move, %s is warm in %v", in.Digest, in.Warm)
		}
	}
	body = string(f.do("GET", "/metrics", "", nil).body)
	if want := `airlock_pool_image_name{tier="process",image="` + moved + `",name="other"} 1`; !strings.Contains(body, want+"\n") || strings.Contains(body, other) {
		t.Errorf("metrics after the move: want %q and nothing of %s:\n%s", want, other, body)
	}

	// The pool's name is removed while its image stays under another: the
	// pool can no longer start an instance, and says why in /v1/tiers and
	// /metrics instead of leaving every job to start cold in silence.
	if d, err := st.Import(ctx, "alias", movedLayout); err != nil || d != moved {
		t.Fatalf("alias: %s, %v", d, err)
	}
	if err := st.Remove(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	r = f.do("POST", "/v1/run", keyB, `{"kind":"command","argv":["cat","/etc/os-release"],"situation":"internal","image":"alias"}`)
	if res := r.result(t); r.status != http.StatusOK || strings.TrimSpace(res.Stdout) != "ID=airlock-other-moved" {
		t.Fatalf("image alias: status %d, %+v", r.status, res)
	}
	var poolErr string
	for deadline := time.Now().Add(time.Minute); poolErr == "" && time.Now().Before(deadline); {
		var tiersOut []struct {
			Name      string `json:"name"`
			PoolError string `json:"pool_error"`
		}
		f.do("GET", "/v1/tiers", keyB, nil).decode(t, &tiersOut)
		for _, ti := range tiersOut {
			if ti.Name == "process" {
				poolErr = ti.PoolError
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(poolErr, "other") || !strings.Contains(poolErr, "unknown image name") {
		t.Errorf("process pool_error after its name was removed: %q", poolErr)
	}
	body = string(f.do("GET", "/metrics", "", nil).body)
	if strings.Contains(body, `airlock_pool_start_failures_total{tier="process"} 0`+"\n") || !strings.Contains(body, `airlock_pool_start_failures_total{tier="process"} `) {
		t.Errorf("metrics count no failed start of the process pool:\n%s", body)
	}
}

// TestRegistryCredentialsKept: the store's registry credentials file is a
// path the server keeps for itself: a read grant of it is refused even
// under a tenant's read root, as a grant of the directory holding it is.
func TestRegistryCredentialsKept(t *testing.T) {
	root := t.TempDir()
	creds := filepath.Join(root, "registry.json")
	if err := os.WriteFile(creds, []byte(`{"auths":{"registry.example":{"registrytoken":"secret"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := image.Open(t.TempDir(), image.Options{AuthFile: creds})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Tenants[0].ReadRoots = []string{root}
	f := storeFixture(t, cfg, st, tierset.Options{})
	expectDenied(t, f.do("POST", "/v1/run", keyA, readJob(creds)), "the server keeps")
	expectDenied(t, f.do("POST", "/v1/run", keyA, readJob(root)), "the server keeps")
}

// TestTenantKeyIsNoApprover: a tenant's own key, or another tenant's, in
// an approver list is refused (in any letter case), since that tenant
// could then approve its own jobs.
func TestTenantKeyIsNoApprover(t *testing.T) {
	for name, h := range map[string]string{
		"own key":          server.HashKey(keyA),
		"own key, upper":   strings.ToUpper(server.HashKey(keyA)),
		"another tenant's": server.HashKey(keyB),
	} {
		c := testConfig()
		c.Tenants[0].ApproverSHA256 = append(c.Tenants[0].ApproverSHA256, h)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "may not approve") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestTenantKeysAreDistinct: two tenants may not share a key, however its
// hash's hex is written: the key would authenticate as only one of them.
func TestTenantKeysAreDistinct(t *testing.T) {
	c := testConfig()
	c.Tenants[1].KeySHA256 = strings.ToUpper(c.Tenants[0].KeySHA256)
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "the same key as tenant a") {
		t.Errorf("tenant b with tenant a's key in upper case: %v", err)
	}
}

// TestApprovalBindsImageContent: an approved command job runs only in the
// image its name pointed at when the approval was requested; the name moved
// to another image afterwards makes the token stale, and a new request
// binds the new image.
func TestApprovalBindsImageContent(t *testing.T) {
	ctx := context.Background()
	st, err := image.Open(t.TempDir(), image.Options{Default: "tool"})
	if err != nil {
		t.Fatal(err)
	}
	approved, err := st.Import(ctx, "tool", imagetest.Layout(t, imagetest.Busybox(t, "airlock-approved"), nil))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	rules := append(slices.Clone(*cfg.Approvals.Rules), approve.Rule{Name: "internal-command",
		Kinds: []airlock.Kind{airlock.KindCommand}, Situations: []airlock.Situation{airlock.SituationInternal}})
	cfg.Approvals.Rules = &rules
	f := storeFixture(t, cfg, st, tierset.Options{})

	job := `{"kind":"command","argv":["cat","/etc/os-release"],"situation":"internal","image":"tool"}`
	tok := f.approveAny(t, keyA, job)
	r := f.do("POST", "/v1/run", keyA, job, server.ApprovalHeader, tok.Token)
	if r.status == http.StatusForbidden && strings.Contains(string(r.body), "unavailable") {
		tiertest.Unavailable(t, "process", errorString(r.body))
	}
	if res := r.result(t); r.status != http.StatusOK || strings.TrimSpace(res.Stdout) != "ID=airlock-approved" {
		t.Fatalf("approved run: %d %s", r.status, r.body)
	}

	// Another job, so that its token is not the one redeemed above. The
	// approver is shown the image content the approval binds.
	job = strings.Replace(job, `"/etc/os-release"`, `"/etc/os-release","/dev/null"`, 1)
	var req struct{ Digest string }
	f.do("POST", "/v1/approvals", keyA, job).decode(t, &req)
	var shown struct {
		Display struct {
			Image       string `json:"image"`
			ImageDigest string `json:"image_digest"`
		} `json:"display"`
	}
	f.do("GET", "/v1/approvals/"+req.Digest, keyApprover, nil).decode(t, &shown)
	if shown.Display.Image != "tool" || shown.Display.ImageDigest != approved {
		t.Errorf("the approver sees image %q, content %q; want tool, %s", shown.Display.Image, shown.Display.ImageDigest, approved)
	}
	tok = f.approveAny(t, keyA, job)
	if _, err := st.Import(ctx, "tool", imagetest.Layout(t, imagetest.Busybox(t, "airlock-moved"), nil)); err != nil {
		t.Fatal(err)
	}
	r = f.do("POST", "/v1/run", keyA, job, server.ApprovalHeader, tok.Token)
	if strings.Contains(string(r.body), "airlock-moved") {
		t.Fatalf("the moved image ran under the old approval: %s", r.body)
	}
	expectStale(t, r, "differs")
	tok = f.approveAny(t, keyA, job)
	r = f.do("POST", "/v1/run", keyA, job, server.ApprovalHeader, tok.Token)
	if res := r.result(t); r.status != http.StatusOK || strings.TrimSpace(res.Stdout) != "ID=airlock-moved" {
		t.Fatalf("run approved after the move: %d %s", r.status, r.body)
	}
}

// TestInternalErrorsKeepTheirCause: when airlock itself fails (here the
// image store cannot be listed), the client gets 500 and one line saying
// what failed; the cause, which names the server's own paths, goes to the
// server's log only.
func TestInternalErrorsKeepTheirCause(t *testing.T) {
	dir := t.TempDir()
	st, err := image.Open(dir, image.Options{Default: "tool"})
	if err != nil {
		t.Fatal(err)
	}
	log := &syncbuf.Buffer{}
	srv, err := newServerTiers(testConfig(), tierset.Options{Images: st}, server.Options{Images: st, Audit: io.Discard, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer func() { hs.Close(); _ = srv.Close() }()
	f := &fixture{t: t, srv: srv, http: hs}
	// The store's directory of images is not a directory any more.
	images := filepath.Join(dir, "images")
	if err := os.RemoveAll(images); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(images, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := f.do("GET", "/v1/images", keyA, nil)
	if r.status != 500 || strings.Contains(string(r.body), dir) || !strings.Contains(string(r.body), `"kind":"internal"`) ||
		!strings.Contains(string(r.body), "listing images") || strings.Count(string(r.body), "\n") != 1 {
		t.Errorf("status %d %s; want 500, one line naming what failed, no path", r.status, r.body)
	}
	if !strings.Contains(log.String(), dir) {
		t.Errorf("the server's log lacks the cause: %q", log.String())
	}
}
