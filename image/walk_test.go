//go:build linux

package image

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestDeepWalksBounded: an image whose names are all deep makes the
// unpacker walk every directory on the way to each of them, a few
// microseconds each: a few thousand deep names take as long as a real
// image, a million of them (a layer of a few MB, gzip'd) hours. What
// the unpacker walks in all is bounded: such an image is refused in
// about the time the bound takes, a real image's names walk far less.
func TestDeepWalksBounded(t *testing.T) {
	old := maxWalk
	maxWalk = 1 << 20 // a few seconds, not minutes
	defer func() { maxWalk = old }()
	f := newFixture(t, Options{MaxBytes: 1 << 30})
	deep := strings.Repeat("a/", 2000)
	n := maxWalk/2000 + 1000
	ents := make([]ent, 0, n)
	for i := 0; i < n; i++ {
		ents = append(ents, file(fmt.Sprintf("%sf%d", deep, i), ""))
	}
	img := imageOf(t, nil, layerOf(t, ents...))
	if _, err := img.RawManifest(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := f.importImage("deep", img)
	imageError(t, err, true, "too large")
	t.Logf("refused in %s", time.Since(start).Round(time.Millisecond))
	f.tmpEmpty()
}
