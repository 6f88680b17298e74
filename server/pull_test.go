package server_test

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testing/imagetest"
	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/airlock-sandbox/airlock/internal/tierset"
	"github.com/airlock-sandbox/airlock/server"
)

// TestTenantPullRegistries: a job's image reference is pulled only from a
// registry in images.registries, or when the tenant's images list names it.
// Any other reference is refused before the server sends a request: a
// tenant may not aim the server's network position at a host of its choice.
func TestTenantPullRegistries(t *testing.T) {
	var hits atomic.Int64
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	idx, err := layout.ImageIndexFromPath(imagetest.Layout(t, imagetest.Busybox(t, "airlock-pulled"), nil))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.ParseReference(host + "/team/tool:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	ref := host + "/team/tool@" + im.Manifests[0].Digest.String()
	hits.Store(0)

	st, err := image.Open(t.TempDir(), image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := func(registries []string, tenantImages []string) *fixture {
		cfg := testConfig()
		cfg.Images = &server.ImageSettings{Registries: registries}
		cfg.Tenants[0].Images = tenantImages
		cfg.Tenants[1].Tiers = append(cfg.Tenants[1].Tiers, "process")
		return storeFixture(t, cfg, st, tierset.Options{})
	}
	job := func(ref string) string {
		return `{"kind":"command","argv":["cat","/etc/os-release"],"situation":"internal","image":"` + ref + `"}`
	}

	// No registries: whatever the reference's form, tenant b (no images
	// list) is refused and the registry sees nothing.
	f := start(nil, []string{ref})
	loopbackName := strings.Replace(ref, "127.0.0.1", "localhost", 1)
	// A reference that starts as a digest does is one to the registry at
	// the host "sha256" (resolved in the server's DNS search domains).
	digestLike := "sha256:443/team/tool@" + im.Manifests[0].Digest.String()
	for _, r := range []string{ref, host + "/team/tool:v1", loopbackName, "team/tool@" + im.Manifests[0].Digest.String(), digestLike} {
		resp := f.do("POST", "/v1/run", keyB, job(r))
		var e struct {
			Error struct{ Kind, Message string }
		}
		resp.decode(t, &e)
		if resp.status != http.StatusForbidden || e.Error.Kind != string(airlock.ErrNotAdmitted) || !strings.Contains(e.Error.Message, "is not in images.registries") {
			t.Errorf("image %s without registries: %d %s", r, resp.status, resp.body)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the registry saw %d requests for refused references", n)
	}

	// The tenant whose images list names the reference has it pulled.
	resp := f.do("POST", "/v1/run", keyA, job(ref))
	if resp.status == http.StatusForbidden && strings.Contains(string(resp.body), "unavailable") {
		tiertest.Unavailable(t, "process", errorString(resp.body))
	}
	res := resp.result(t)
	if resp.status != http.StatusOK || strings.TrimSpace(res.Stdout) != "ID=airlock-pulled" || hits.Load() == 0 {
		t.Fatalf("listed reference: %d %+v (%d registry requests)", resp.status, res, hits.Load())
	}

	// A registry the operator lists is open to every tenant.
	g := start([]string{host}, nil)
	resp = g.do("POST", "/v1/run", keyB, job(ref))
	if res := resp.result(t); resp.status != http.StatusOK || strings.TrimSpace(res.Stdout) != "ID=airlock-pulled" {
		t.Fatalf("listed registry: %d %+v", resp.status, res)
	}
}
