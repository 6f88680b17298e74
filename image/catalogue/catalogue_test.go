package catalogue

import (
	"slices"
	"testing"
)

// The embedded recipes parse, and the images the tiers and docs name
// are there, each complete enough for mmdebstrap.
func TestRecipes(t *testing.T) {
	r := Recipes()
	if !slices.Equal(Names(), []string{"minimal", "node", "python"}) {
		t.Fatalf("names %v", Names())
	}
	for name, rec := range r {
		if rec.Suite == "" || rec.Variant == "" || rec.Description == "" {
			t.Errorf("%s: incomplete recipe %+v", name, rec)
		}
	}
	if !slices.Contains(r["python"].Packages, "python3-numpy") {
		t.Error("the python image has no numpy")
	}
}
