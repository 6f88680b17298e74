//go:build linux

package image

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestPullSwappedContent: a registry that answers a request for one
// manifest, configuration or layer with another's content (each valid,
// of an image it also serves) fails the pull as a corrupt image, leaves
// nothing in the store, and puts no image under the digest it named.
func TestPullSwappedContent(t *testing.T) {
	good, evil := goodImage(t, "good"), goodImage(t, "evil")
	gm, _ := good.Manifest()
	em, _ := evil.Manifest()
	eraw, _ := evil.RawManifest()
	flipped := mustBlob(t, good, gm.Layers[0].Digest)
	flipped[len(flipped)/2] ^= 0xff
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: good, Descriptor: v1.Descriptor{Platform: &amd64}})
	for _, tc := range []struct {
		name string
		// swap maps a path's suffix to what is served instead.
		swap map[string][]byte
		ref  func(repo string) string
		want string
	}{
		{"manifest", map[string][]byte{"/manifests/" + digestOf(t, good): eraw}, nil, "does not match requested digest"},
		{"config", map[string][]byte{"/blobs/" + gm.Config.Digest.String(): mustBlob(t, evil, em.Config.Digest)}, nil, "checksum"},
		{"layer", map[string][]byte{"/blobs/" + gm.Layers[0].Digest.String(): mustBlob(t, evil, em.Layers[0].Digest)}, nil, "does not match expected size"},
		{"layer of its size", map[string][]byte{"/blobs/" + gm.Layers[0].Digest.String(): flipped}, nil, "corrupt blob"},
		{"index entry", map[string][]byte{"/manifests/" + digestOf(t, good): eraw}, func(repo string) string {
			d, _ := idx.Digest()
			return repo + "@" + d.String()
		}, "does not match requested digest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := registry.New(registry.Logger(nilLogger()))
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet && r.Header.Get("X-Push") == "" {
					for suffix, body := range tc.swap {
						if strings.HasSuffix(r.URL.Path, suffix) {
							if strings.Contains(suffix, "/manifests/") {
								w.Header().Set("Content-Type", string(gm.MediaType))
							}
							w.Header().Set("Docker-Content-Digest", suffix[strings.LastIndex(suffix, "/")+1:])
							io.Copy(w, bytes.NewReader(body))
							return
						}
					}
				}
				reg.ServeHTTP(w, r)
			}))
			defer srv.Close()
			repo := strings.TrimPrefix(srv.URL, "http://") + "/team/app"
			push := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				r = r.Clone(r.Context())
				r.Header.Set("X-Push", "1")
				return http.DefaultTransport.RoundTrip(r)
			})
			for tag, img := range map[string]v1.Image{"good": good, "evil": evil} {
				ref, err := name.ParseReference(repo + ":" + tag)
				if err != nil {
					t.Fatal(err)
				}
				if err := remote.Write(ref, img, remote.WithTransport(push)); err != nil {
					t.Fatal(err)
				}
			}
			iref, _ := name.ParseReference(repo + ":index")
			if err := remote.WriteIndex(iref, idx, remote.WithTransport(push)); err != nil {
				t.Fatal(err)
			}
			ref := repo + "@" + digestOf(t, good)
			if tc.ref != nil {
				ref = tc.ref(repo)
			}
			f := newFixture(t, Options{})
			_, err := f.s.Pull(context.Background(), ref)
			if err == nil {
				t.Fatal("pulled")
			}
			t.Log(err)
			imageError(t, err, false, tc.want)
			infos, lerr := f.s.List()
			if lerr != nil {
				t.Fatal(lerr)
			}
			if len(infos) != 0 {
				t.Errorf("the store holds %d images", len(infos))
			}
			f.tmpEmpty()
		})
	}
}

func mustBlob(t *testing.T, img v1.Image, h v1.Hash) []byte {
	t.Helper()
	if cf, _ := img.ConfigName(); cf == h {
		b, err := img.RawConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	l, err := img.LayerByDigest(h)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
