// Package image gives command jobs their environment: OCI images, verified
// and unpacked once into a content-addressed store, used read-only as the
// root of every OS tier's sandbox.
//
// A job names an image in Job.Image: a name from the operator's catalogue
// ("python", "minimal", or one the operator adds), an OCI reference pinned
// by digest ("registry.example/team/tool@sha256:…"), or empty for the
// operator's default. The tiers ask a Resolver for the unpacked image and
// hold it until their sandbox is gone, so the store never evicts an image in
// use.
package image

import (
	"context"
	"strconv"
	"strings"
)

// Host names the host's own software as a sandbox's root (the view the
// tiers had before images): /usr and the top-level links into it, read-only.
// It is for internal tooling, and a Resolver offers it only where the
// operator enables it.
const Host = "host"

// Image is an unpacked image, ready to be a sandbox's root.
type Image struct {
	// Ref is what the job asked for ("python", a pinned reference), after
	// the default was applied.
	Ref string
	// Digest identifies what runs: the manifest's "sha256:…" digest, or
	// Host for the host view.
	Digest string
	// Root is the unpacked root filesystem. It belongs to the store: never
	// written, and valid until the release function Acquire returned runs.
	// Empty for the host view. Beside the image's own files it holds the
	// empty MountPoints an image lacks.
	Root string
	// Config is what of the image's configuration a sandbox applies.
	Config Config
}

// MountPoints are the paths the OS tiers mount over in every sandbox
// (directories end in "/"): the store adds those an image lacks, empty, as
// it unpacks it, so that no tier's runtime has to make one in a root that
// every sandbox of the image shares (gVisor's would, on the host).
var MountPoints = []string{
	"dev/", "proc/", "sys/", "tmp/", "scratch/",
	"etc/", "etc/passwd", "etc/group", "etc/hosts", "etc/hostname", "etc/resolv.conf",
	".airlock/", ".airlock/sock/", ".airlock/lib/", ".airlock/agent", ".airlock/guard",
}

// IsHost reports whether img is the host view rather than an image.
func (img *Image) IsHost() bool { return img == nil || img.Digest == Host }

// Config is the part of an OCI image configuration a sandbox applies, where
// it does not widen a grant: the environment, the working directory and the
// user (mapped to the sandbox's unprivileged uid).
type Config struct {
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
}

// Getenv returns the value of name in the image's environment.
func (c Config) Getenv(name string) (string, bool) {
	for _, kv := range c.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// Resolver turns a job's image field into an unpacked image. The tiers take
// one in their configuration; a tier without one runs the host view.
type Resolver interface {
	// Acquire resolves ref ("" for the default image) and returns the
	// unpacked image, pulling and unpacking it first if needed. The image
	// stays in the store until release is called (release is safe to call
	// more than once). The error is *Error for a reference that is invalid,
	// unknown or not allowed.
	Acquire(ctx context.Context, ref string) (img *Image, release func(), err error)
	// Derive returns a directory holding an artefact built from img (a
	// tier's disk image, say), named by kind, building it with build on
	// first use: build fills dir, which becomes the artefact only when
	// build returns nil, so an interrupted build leaves nothing behind.
	// Concurrent calls for one image and kind build once. The artefact is
	// removed with the image.
	Derive(ctx context.Context, img *Image, kind string, build func(dir string) error) (string, error)
}

// Checker is a Resolver that tells, without pulling anything, whether
// Acquire would refuse a reference, with the error Acquire would return:
// what lets an explanation of a job agree with its run.
type Checker interface {
	Check(ref string) error
}

// Error is an image that cannot be used: a reference that is malformed,
// unknown, not pinned, not allowed, or whose content fails verification.
// Invalid is true when the job is at fault (a bad or unknown reference) and
// false when the store is (a corrupt blob, a full disk).
type Error struct {
	Ref     string
	Invalid bool
	Err     error
}

func (e *Error) Error() string {
	ref := e.Ref
	if ref == "" {
		ref = "(default)"
	} else if !printableASCII(ref) {
		ref = strconv.QuoteToASCII(ref) // a look-alike or a control shown as what it is
	}
	return "image " + ref + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// DefaultPATH is the PATH of a program whose image sets none.
const DefaultPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// baseline is what a sandbox's environment holds where the image sets
// none: the same on every tier, so a job sees one environment wherever it
// runs.
var baseline = []string{"PATH=" + DefaultPATH, "HOME=/scratch", "TMPDIR=/tmp", "LANG=C.UTF-8"}

// Baseline is a program's whole environment in the host view, which has
// no image variables: the baseline (PATH, HOME=/scratch, TMPDIR=/tmp,
// LANG=C.UTF-8), then over, which replaces any variable of the same name.
func Baseline(over ...string) []string { return (&Image{}).Environ(over...) }

// Environ is a program's whole environment in img: the image's variables,
// the baseline (PATH, HOME=/scratch, TMPDIR=/tmp, LANG=C.UTF-8) where the
// image sets none, then over ("NAME=value": the job's secrets, a tier's
// egress variables), which replaces any variable of the same name. Each
// name appears once (libc's getenv takes the first), and nothing comes
// from the host.
func (img *Image) Environ(over ...string) []string {
	env := make([]string, 0, len(img.Config.Env)+len(baseline)+len(over))
	seen := make(map[string]bool, cap(env))
	for _, kv := range over {
		if k, _, ok := strings.Cut(kv, "="); ok {
			seen[k] = true
		}
	}
	for _, list := range [][]string{img.Config.Env, baseline} {
		for _, kv := range list {
			k, _, ok := strings.Cut(kv, "=")
			if !ok || k == "" || seen[k] || strings.IndexByte(kv, 0) >= 0 {
				continue
			}
			seen[k] = true
			env = append(env, kv)
		}
	}
	return append(env, over...)
}

// printableASCII reports whether ref is written in printable ASCII, as
// every image name and registry reference is: a registry's international
// name is written in its xn-- form, so a letter from another script is a
// look-alike, and a control or a bidi override would show the reference
// as what it is not.
func printableASCII(ref string) bool {
	for i := 0; i < len(ref); i++ {
		if ref[i] <= ' ' || ref[i] > '~' {
			return false
		}
	}
	return true
}
