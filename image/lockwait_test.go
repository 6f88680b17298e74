//go:build linux

package image

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestWaitOnAnotherProcessEnds: a job waiting for another process's
// unpack or build of its image (the per-image file lock) stops waiting
// when its own context ends, rather than for as long as the other's work
// lasts; the other's work goes on.
func TestWaitOnAnotherProcessEnds(t *testing.T) {
	waited := func(t *testing.T, what string, run func(ctx context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		errs := make(chan error, 1)
		go func() { errs <- run(ctx) }()
		select {
		case err := <-errs:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: %v, want its context's end", what, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s still waits for the other process 5s after its context ended", what)
		}
	}

	t.Run("derive", func(t *testing.T) {
		f := newFixture(t, Options{})
		if _, err := f.importImage("python", goodImage(t, "d")); err != nil {
			t.Fatal(err)
		}
		img, _ := f.acquire("python")
		other, err := Open(f.s.dir, Options{}) // another process
		if err != nil {
			t.Fatal(err)
		}
		building, release := make(chan struct{}), make(chan struct{})
		first := make(chan error, 1)
		go func() {
			_, err := f.s.Derive(context.Background(), img, "disk", func(string) error {
				close(building)
				<-release
				return nil
			})
			first <- err
		}()
		<-building
		waited(t, "a derive", func(ctx context.Context) error {
			_, err := other.Derive(ctx, img, "disk", func(string) error { return errors.New("built twice") })
			return err
		})
		close(release)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		f.tmpEmpty()
	})

	t.Run("pull", func(t *testing.T) {
		ref, hit, release := gatedRegistry(t, goodImage(t, "locked"))
		f := newFixture(t, Options{})
		other, err := Open(f.s.dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		first := make(chan error, 1)
		go func() { _, err := f.s.Pull(context.Background(), ref); first <- err }()
		<-hit // the first process unpacks, holding the image's lock
		waited(t, "a pull", func(ctx context.Context) error {
			_, err := other.Pull(ctx, ref)
			return err
		})
		release()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		f.tmpEmpty()
	})
}

// gatedRegistry serves img from a registry on loopback, pushed there, and
// returns its reference by digest: a pull's first blob request signals hit
// and waits until release (or the request ends). release may be called
// more than once; the test's end calls it.
func gatedRegistry(t *testing.T, img v1.Image) (ref string, hit <-chan struct{}, release func()) {
	t.Helper()
	reg := registry.New(registry.Logger(nilLogger()))
	hits, gate := make(chan struct{}, 1), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, blob := repoOf(r.URL.Path); blob && r.Header.Get("X-Push") == "" && r.Method == http.MethodGet {
			select {
			case hits <- struct{}{}:
			default:
			}
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		reg.ServeHTTP(w, r)
	}))
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(srv.Close)
	t.Cleanup(release) // before srv.Close: cleanups run last first
	host := strings.TrimPrefix(srv.URL, "http://")
	pushRef, err := name.ParseReference(host + "/team/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	push := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("X-Push", "1")
		return http.DefaultTransport.RoundTrip(r)
	})
	if err := remote.Write(pushRef, img, remote.WithTransport(push)); err != nil {
		t.Fatal(err)
	}
	return host + "/team/app@" + digestOf(t, img), hits, release
}
