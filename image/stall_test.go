//go:build linux

package image

import (
	"context"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestPullStalledRegistry: a registry that stops answering (before its
// headers, in the middle of a blob, or sending a byte now and then) fails
// the pull after the stall window, without the caller's context ending,
// and leaves nothing behind; a registry that answers is pulled from as
// before.
func TestPullStalledRegistry(t *testing.T) {
	old := stallWindow
	stallWindow = 400 * time.Millisecond
	defer func() { stallWindow = old }()
	// A layer of 64 KiB that does not compress: a trickle of it lasts.
	noise := make([]byte, 64<<10)
	rand.Read(noise)
	img := imageOf(t, nil, layerOf(t, file("noise", string(noise))))
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	ld, err := ls[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	layer := ld.String()

	for _, tc := range []struct {
		name string
		// stall handles the request instead of the registry when it
		// returns true.
		stall func(w http.ResponseWriter, r *http.Request, done <-chan struct{}) bool
	}{
		{"manifest never answered", func(w http.ResponseWriter, r *http.Request, done <-chan struct{}) bool {
			if !strings.Contains(r.URL.Path, "/manifests/") || r.Method != http.MethodGet {
				return false
			}
			select {
			case <-done:
			case <-r.Context().Done():
			}
			return true
		}},
		{"layer stops half-way", func(w http.ResponseWriter, r *http.Request, done <-chan struct{}) bool {
			if !strings.HasSuffix(r.URL.Path, "/blobs/"+layer) || r.Method != http.MethodGet {
				return false
			}
			w.WriteHeader(http.StatusOK)
			w.Write(make([]byte, 10))
			w.(http.Flusher).Flush()
			select {
			case <-done:
			case <-r.Context().Done():
			}
			return true
		}},
		{"layer trickles", func(w http.ResponseWriter, r *http.Request, done <-chan struct{}) bool {
			if !strings.HasSuffix(r.URL.Path, "/blobs/"+layer) || r.Method != http.MethodGet {
				return false
			}
			w.WriteHeader(http.StatusOK)
			for i := 0; i < 100000; i++ {
				if _, err := w.Write([]byte{0x1f}); err != nil {
					return true
				}
				w.(http.Flusher).Flush()
				select {
				case <-done:
					return true
				case <-r.Context().Done():
					return true
				case <-time.After(50 * time.Millisecond):
				}
			}
			return true
		}},
		{"answers", func(http.ResponseWriter, *http.Request, <-chan struct{}) bool { return false }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := registry.New(registry.Logger(nilLogger()))
			done := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("X-Push") == "" && tc.stall(w, r, done) {
					return
				}
				reg.ServeHTTP(w, r)
			}))
			defer srv.Close()
			defer close(done)
			host := strings.TrimPrefix(srv.URL, "http://")
			pushRef, err := name.ParseReference(host + "/team/app:v1")
			if err != nil {
				t.Fatal(err)
			}
			push := func(rt http.RoundTripper) http.RoundTripper {
				return roundTripFunc(func(r *http.Request) (*http.Response, error) {
					r = r.Clone(r.Context())
					r.Header.Set("X-Push", "1")
					return rt.RoundTrip(r)
				})
			}
			if err := remote.Write(pushRef, img, remote.WithTransport(push(http.DefaultTransport))); err != nil {
				t.Fatal(err)
			}
			f := newFixture(t, Options{})
			errs := make(chan error, 1)
			start := time.Now()
			go func() { _, err := f.s.Pull(context.Background(), host+"/team/app@"+digestOf(t, img)); errs <- err }()
			select {
			case err = <-errs:
			case <-time.After(20 * time.Second):
				t.Fatalf("the pull still runs after %s", time.Since(start).Round(time.Second))
			}
			if tc.name == "answers" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("pulled")
			}
			imageError(t, err, false, "sent less than")
			t.Log(err)
			f.tmpEmpty()
			if f.s.has(digestOf(t, img)) {
				t.Error("the image is in the store")
			}
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
