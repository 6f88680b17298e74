//go:build linux

package image

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// pushed serves imgs from an in-process registry on loopback and returns
// their references pinned by digest.
func pushed(t *testing.T, imgs ...v1.Image) []string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(nilLogger())))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	var refs []string
	for i, img := range imgs {
		r, err := name.ParseReference(fmt.Sprintf("%s/team/app%d:v1", host, i))
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(r, img); err != nil {
			t.Fatal(err)
		}
		refs = append(refs, fmt.Sprintf("%s/team/app%d@%s", host, i, digestOf(t, img)))
	}
	return refs
}

// emptyFiles is an image of n empty files (an inode each, no bytes).
func emptyFiles(t *testing.T, marker string, n int) v1.Image {
	ents := []ent{dir("many")}
	for i := 0; i < n; i++ {
		ents = append(ents, file(fmt.Sprintf("many/%s-%d", marker, i), ""))
	}
	return imageOf(t, nil, layerOf(t, ents...))
}

// TestStoreCountsInodesAndLinksOnce: the store's size, which eviction
// keeps within the cap, is what its images take: a hard-linked file
// counts once (else an image of a few links would evict every other
// image), and every entry counts a block, so images of empty files, which
// cost the disk inodes and no bytes, cannot pile up in the store without
// bound; one with more entries than its cap allows is refused.
func TestStoreCountsInodesAndLinksOnce(t *testing.T) {
	const max = 16 << 20
	f := newFixture(t, Options{MaxBytes: max})
	small := goodImage(t, "small")
	body := strings.Repeat("x", 256<<10)
	linkEnts := []ent{file("big", body)}
	for i := 0; i < 80; i++ {
		linkEnts = append(linkEnts, hardlink(fmt.Sprintf("link%d", i), "big"))
	}
	links := imageOf(t, nil, layerOf(t, linkEnts...))
	var many []v1.Image
	for i := 0; i < 4; i++ {
		many = append(many, emptyFiles(t, fmt.Sprint("m", i), 1500))
	}
	tooMany := emptyFiles(t, "over", 5000)
	refs := pushed(t, append([]v1.Image{small, links, tooMany}, many...)...)

	// Links: 81 names of one 256 KiB file are 256 KiB, not 20 MiB.
	for _, ref := range refs[:2] {
		if _, err := f.s.Pull(context.Background(), ref); err != nil {
			t.Fatal(err)
		}
	}
	if !f.s.has(digestOf(t, small)) {
		t.Error("an image of hard links evicted the other image: its links counted as copies")
	}
	sizes := map[string]int64{}
	infos, err := f.s.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		sizes[in.Digest] = in.Size
	}
	if n := sizes[digestOf(t, links)]; n < 256<<10 || n > 1<<20 {
		t.Errorf("the image of one 256 KiB file and 80 links counts %d bytes", n)
	}

	// Inodes: 1500 empty files count 1500 blocks, so the store keeps
	// at most two such images within its 16 MiB.
	_, err = f.s.Pull(context.Background(), refs[2])
	imageError(t, err, true, "too large")
	for _, ref := range refs[3:] {
		if _, err := f.s.Pull(context.Background(), ref); err != nil {
			t.Fatal(err)
		}
	}
	infos, err = f.s.List()
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, in := range infos {
		total += in.Size
		if in.Digest == digestOf(t, many[3]) && in.Size < 1500*4096 {
			t.Errorf("an image of 1500 empty files counts %d bytes", in.Size)
		}
	}
	if total > max {
		t.Errorf("the store counts %d bytes in %d images, over its cap of %d", total, len(infos), max)
	}
	if !f.s.has(digestOf(t, many[3])) {
		t.Error("the image just pulled was evicted")
	}
	f.tmpEmpty()
}

// TestPulledImageWithinItsCap: an image the unpacker took within the cap
// is within it as the store counts it, mount points included, so a Pull
// never returns an image its own eviction took at once; one that is not
// is refused as too large.
func TestPulledImageWithinItsCap(t *testing.T) {
	const max = 1 << 20
	f := newFixture(t, Options{MaxBytes: max})
	img := imageOf(t, nil, layerOf(t, file("big", strings.Repeat("x", max-entryCost-100))))
	refs := pushed(t, img)
	d, err := f.s.Pull(context.Background(), refs[0])
	if err == nil && !f.s.has(d) {
		t.Fatal("Pull returned an image the store no longer has: it counts more than its unpack did")
	}
	if err != nil {
		imageError(t, err, true, "too large")
	}
	f.tmpEmpty()
}
