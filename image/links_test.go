//go:build linux

package image

import (
	"fmt"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"golang.org/x/sys/unix"
)

// TestTooManyLinksIsTheImages: more hard links to one file than the file
// system holds (65,000 on ext4) is the image's fault, as a refused entry,
// not the store's condition.
func TestTooManyLinksIsTheImages(t *testing.T) {
	f := newFixture(t, Options{MaxBytes: 1 << 30})
	var st unix.Statfs_t
	if err := unix.Statfs(f.s.dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.EXT4_SUPER_MAGIC {
		testenv.Skipf(t, "the store's file system (%#x) is not ext4, whose link limit the test reaches", st.Type)
	}
	ents := []ent{file("a", "a")}
	for i := 0; i < 65001; i++ {
		ents = append(ents, hardlink(fmt.Sprint("l", i), "a"))
	}
	_, err := f.importImage("links", imageOf(t, nil, layerOf(t, ents...)))
	imageError(t, err, true, "too many links")
	f.tmpEmpty()
}
