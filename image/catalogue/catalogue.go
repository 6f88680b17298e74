// Package catalogue builds the operator's catalogue images from Debian
// packages with mmdebstrap, so they exist on a machine that reaches no
// container registry, and writes them as OCI image layouts that go through
// the image store like any other image.
package catalogue

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Recipe is how one catalogue image is built.
type Recipe struct {
	Description string `json:"description"`
	// Suite is the Debian release ("bookworm").
	Suite string `json:"suite"`
	// Variant is mmdebstrap's package set to start from ("essential": the
	// packages Debian marks essential, a shell and coreutils among them).
	Variant string `json:"variant"`
	// Packages are installed on top, with their dependencies.
	Packages []string `json:"packages"`
	// Env is the image's environment.
	Env []string `json:"env"`
}

//go:embed recipes.json
var recipesJSON []byte

// Recipes returns the built-in catalogue, by name.
func Recipes() map[string]Recipe {
	var r map[string]Recipe
	if err := json.Unmarshal(recipesJSON, &r); err != nil {
		panic("catalogue: recipes.json: " + err.Error()) // embedded, checked by the tests
	}
	return r
}

// Names returns the built-in catalogue's names, sorted.
func Names() []string {
	r := Recipes()
	names := make([]string, 0, len(r))
	for n := range r {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// RecipeLabel is the image configuration label a catalogue image carries:
// the digest of the recipe it was built from, so a build can tell an image
// that is current from one a changed recipe made stale.
const RecipeLabel = "org.airlock.recipe"

// Digest identifies the recipe: what its image is built from.
func (r Recipe) Digest() string {
	b, err := json.Marshal(r)
	if err != nil {
		panic("catalogue: recipe: " + err.Error()) // plain strings and slices
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// DefaultMirror is the Debian archive the recipes are built from.
const DefaultMirror = "http://deb.debian.org/debian"

// Build builds recipe r with mmdebstrap into an OCI image layout in a new
// directory under work, and returns that directory. mmdebstrap's own
// output goes to log. It needs mmdebstrap (Debian's package) and, for
// mmdebstrap, root or a user namespace.
func Build(ctx context.Context, r Recipe, mirror, work string, log io.Writer) (string, error) {
	bin, err := exec.LookPath("mmdebstrap")
	if err != nil {
		return "", errors.New("mmdebstrap is not installed (Debian package mmdebstrap; make setup installs it)")
	}
	if mirror == "" {
		mirror = DefaultMirror
	}
	dir, err := os.MkdirTemp(work, "build-")
	if err != nil {
		return "", err
	}
	rootTar := filepath.Join(dir, "rootfs.tar")
	args := []string{"--variant=" + r.Variant, "--format=tar", "--quiet"}
	if len(r.Packages) > 0 {
		args = append(args, "--include="+strings.Join(r.Packages, ","))
	}
	args = append(args, r.Suite, rootTar, mirror)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// A fixed date makes the tarball's timestamps, and so the digest, a
	// function of the packages alone.
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=0")
	if err := cmd.Run(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("mmdebstrap %s: %w", r.Suite, err)
	}
	out := filepath.Join(dir, "oci")
	if err := writeLayout(rootTar, r, out); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	os.Remove(rootTar)
	return out, nil
}

// writeLayout writes the root filesystem tarball as a one-layer image.
func writeLayout(rootTar string, r Recipe, out string) error {
	layer, err := tarball.LayerFromFile(rootTar, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return fmt.Errorf("reading %s: %w", rootTar, err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env = r.Env
	cf.Config.Labels = map[string]string{RecipeLabel: r.Digest()}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	p, err := layout.Write(out, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}))
}
