package gvisor

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/jobs"
)

// Images.
//
// With a resolver (Config.WithImages) a sandbox's root is its job's image,
// unpacked by the store: the bundle's root is the image's directory,
// read-only, and none of the host's directories is mounted. gVisor makes
// the mount points the image lacks (/scratch, /proc, /.airlock…) in its
// own memory, so the image is never written. Over the image's /etc the
// tier mounts its own passwd, group, hosts, hostname and resolv.conf (the
// files of the host view's root), so neither host facts nor the image's
// accounts reach the job. The loader cache of the host view (ldcache.go)
// is not used: the image brings its own /etc/ld.so.cache.
//
// The agent of pooled sandboxes and sessions is bind-mounted from outside
// at agentBin. A static executable (as `make build` produces) needs
// nothing else; a dynamically linked one (a cgo build, a test binary) gets
// its loader and libraries copied once into the tier's own directory and
// mounted at agentLibDir, and is started through that loader, so it never uses
// the image's libraries nor needs any in it.

// agentLibDir holds a dynamically linked agent's loader and libraries.
const agentLibDir = agentDir + "/lib"

// noStore refuses an image when the tier has no resolver.
const noStore = "tier " + Name + " has no image store"

// admitImage refuses, without a resolver, a job naming an image other than
// the host view. It does not allocate.
func (t *Tier) admitImage(ref string) error {
	if t.cfg.images == nil && ref != "" && ref != image.Host {
		return &airlock.NotAdmitted{Tier: Name, Reason: noStore}
	}
	return nil
}

// acquire resolves a job's image. A nil image is the host view without a
// resolver (Result.Image stays empty); release is never nil. An unknown or
// malformed reference is the job's fault (*airlock.InvalidJob), anything
// else the tier's.
func (t *Tier) acquire(ctx context.Context, ref string) (*image.Image, func(), error) {
	if t.cfg.images == nil {
		if err := t.admitImage(ref); err != nil {
			return nil, func() {}, err
		}
		return nil, func() {}, nil
	}
	img, release, err := t.cfg.images.Acquire(ctx, ref)
	if err != nil {
		var ie *image.Error
		if errors.As(err, &ie) && ie.Invalid {
			return nil, func() {}, jobs.Invalid("image", "%v", err)
		}
		return nil, func() {}, fmt.Errorf("acquiring image: %w", err)
	}
	if release == nil {
		release = func() {}
	}
	if img == nil {
		release()
		return nil, func() {}, errors.New("acquiring image: the store returned none")
	}
	if img.IsHost() {
		return img, release, nil
	}
	// runsc needs the root as an absolute path without links.
	root, err := filepath.EvalSymlinks(img.Root)
	if err == nil && !filepath.IsAbs(root) {
		err = errors.New("not an absolute path")
	}
	if err != nil {
		release()
		return nil, func() {}, fmt.Errorf("acquiring image: root of %s: %v", img.Ref, err)
	}
	cp := *img
	cp.Root = root
	return &cp, release, nil
}

// digest is what Result.Image reports for img.
func digest(img *image.Image) string {
	if img == nil {
		return ""
	}
	return img.Digest
}

// envFor is the job's whole environment in img: for the host view,
// jobEnv; for an image, image.Image.Environ with the job's secrets (sorted,
// so equal jobs get equal environments) overriding any variable of the same
// name.
func envFor(img *image.Image, secrets map[string]string) []string {
	if img.IsHost() {
		return jobEnv(secrets)
	}
	names := make([]string, 0, len(secrets))
	for k := range secrets {
		names = append(names, k)
	}
	sort.Strings(names)
	over := make([]string, 0, len(names))
	for _, k := range names {
		over = append(over, k+"="+secrets[k])
	}
	return img.Environ(over...)
}

// setImage makes b's root img's (nothing to do for the host view).
func (t *Tier) setImage(b *bundle, img *image.Image) {
	if img.IsHost() {
		return
	}
	b.rootfs = img.Root
	b.hostDirs = nil
	b.etc = filepath.Join(t.rootfs, "etc")
	b.image = true
}

// agentLibHost is the host directory of a dynamically linked agent's
// loader and libraries: the tier's own, removed with it.
func (t *Tier) agentLibHost() string { return filepath.Join(t.ownDir(), "lib") }

// prepareAgent works out how the agent starts in an image's sandbox (see
// the top of this file), or why it cannot.
func (t *Tier) prepareAgent() ([]string, error) {
	launch, err := agentLaunch(t.agent, t.agentLibHost())
	if err != nil {
		return nil, fmt.Errorf("the agent cannot run in an image: %w", err)
	}
	return launch, nil
}

// agentLaunch returns the argv prefix that starts exe, bind-mounted at
// agentBin, inside an image. For a dynamically linked exe it copies the
// loader and the libraries exe needs into lib (mounted at agentLibDir).
func agentLaunch(exe, lib string) ([]string, error) {
	f, err := elf.Open(exe)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	interp := ""
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			data, err := io.ReadAll(p.Open())
			if err != nil {
				return nil, err
			}
			interp = string(data[:max(0, len(data)-1)]) // NUL-terminated
		}
	}
	if interp == "" {
		return []string{agentBin}, nil
	}
	if err := os.MkdirAll(lib, 0o755); err != nil {
		return nil, err
	}
	if err := copyFile(interp, filepath.Join(lib, filepath.Base(interp))); err != nil {
		return nil, fmt.Errorf("copying the loader: %w", err)
	}
	// The libraries exe needs, and theirs, found where the loader looks
	// for a program of exe's class and machine.
	todo, _ := f.ImportedLibraries()
	seen := map[string]bool{filepath.Base(interp): true}
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		if seen[name] {
			continue
		}
		seen[name] = true
		path, needs, err := findLib(name, f.Class, f.Machine)
		if err != nil {
			return nil, err
		}
		if err := copyFile(path, filepath.Join(lib, name)); err != nil {
			return nil, fmt.Errorf("copying %s: %w", name, err)
		}
		todo = append(todo, needs...)
	}
	dir := agentLibDir
	return []string{dir + "/" + filepath.Base(interp), "--inhibit-cache", "--library-path", dir, agentBin}, nil
}

// libDirs are where findLib looks for a library.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// findLib returns the host path of library name for the given class and
// machine, and the libraries it needs.
func findLib(name string, class elf.Class, machine elf.Machine) (string, []string, error) {
	if filepath.Base(name) != name {
		return "", nil, fmt.Errorf("library %q: not a plain name", name)
	}
	for _, d := range libDirs {
		p := filepath.Join(d, name)
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		ok := f.Class == class && f.Machine == machine
		needs, _ := f.ImportedLibraries()
		f.Close()
		if ok {
			return p, needs, nil
		}
	}
	return "", nil, fmt.Errorf("library %s not found (a static build, CGO_ENABLED=0, needs none)", name)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
