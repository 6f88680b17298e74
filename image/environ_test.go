package image

import (
	"slices"
	"testing"
)

// The image's variables come first, the baseline fills what it lacks, and
// an override replaces a variable of the same name rather than following
// it (libc's getenv takes the first).
func TestEnviron(t *testing.T) {
	img := &Image{Config: Config{Env: []string{"PATH=/opt/bin", "LANG=C", "X=image"}}}
	got := img.Environ("X=secret", "Y=1")
	want := []string{"PATH=/opt/bin", "LANG=C", "HOME=/scratch", "TMPDIR=/tmp", "X=secret", "Y=1"}
	if !slices.Equal(got, want) {
		t.Fatalf("Environ = %q, want %q", got, want)
	}
	if got := (&Image{}).Environ(); !slices.Equal(got, baseline) {
		t.Fatalf("an image without variables: %q, want the baseline %q", got, baseline)
	}
}
