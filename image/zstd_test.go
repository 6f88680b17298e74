//go:build linux

package image

import (
	"bytes"
	"io"
	"runtime"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/klauspost/compress/zstd"
)

// zstdLayer is a layer of ents, zstd-compressed with window as its frame
// declares it.
func zstdLayer(t *testing.T, window int, ents ...ent) []byte {
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf, zstd.WithWindowSize(window), zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithSingleSegment(false))
	if err != nil {
		t.Fatal(err)
	}
	w.Write(tarBytes(t, ents...))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestZstdWindowBounded: a zstd frame declares the window its decoder
// keeps in memory: a layer of a few hundred bytes declaring 256 MiB made
// each unpack of it (one per job naming such an image, at once) allocate
// that. A window over the bound is refused as the image's fault, before
// it is allocated; the windows zstd's levels use (up to 8 MiB, 19 and
// below) unpack.
func TestZstdWindowBounded(t *testing.T) {
	f := newFixture(t, Options{})
	for _, tc := range []struct {
		window int
		ok     bool
	}{{8 << 20, true}, {maxZstdWindow, true}, {256 << 20, false}} {
		b := zstdLayer(t, tc.window, file("z", "zstd"), file("pad", string(make([]byte, 4<<20))))
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			t.Fatal(err)
		}
		img := imageOf(t, nil, l)
		if _, err := img.RawManifest(); err != nil { // digests computed before measuring
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err = f.importImage("z", img)
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		if tc.ok {
			if err != nil {
				t.Errorf("a window of %d MiB: %v", tc.window>>20, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("a layer of %d bytes declaring a window of %d MiB was unpacked, allocating %d MiB", len(b), tc.window>>20, alloc>>20)
			continue
		}
		imageError(t, err, true, "window")
		if alloc > 2*maxZstdWindow {
			t.Errorf("refusing a window of %d MiB allocated %d MiB", tc.window>>20, alloc>>20)
		}
	}
	f.tmpEmpty()
}
