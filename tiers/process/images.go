package process

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/jobs"
)

// WithImages makes the container tier ("process") run each job in the
// image its Image field names, resolved by r ("" for r's default; see
// package image): the unpacked image is the sandbox's read-only root in
// place of the host's /usr and /etc, with the image's /etc except passwd,
// group, hosts, hostname and resolv.conf, which the tier writes as for the
// host view. The scratch, /tmp, /dev, /proc and granted paths are as
// without an image. The program's environment is the image's, then PATH
// (the image's, else the usual system directories, also where a bare
// program name is looked up), HOME=/scratch, TMPDIR=/tmp and LANG=C.UTF-8
// where the image sets none, then the job's secrets; nothing of the host's.
// The image's user is not applied (the program runs as the sandbox's
// unprivileged uid, root inside) and its working directory neither (the
// program starts in /scratch, where the job's files are). An image that
// r reports as the host (image.Host) runs the host view. A sandbox holds
// its image until it is destroyed, a session until it is closed; a pool
// keeps sandboxes of the default image (WithPool) and of those
// WithImagePool names, each only for jobs of its own image.
//
// Without a resolver the tier runs the host view, and refuses a job that
// names an image other than "" or "host". The filter tier ("seccomp")
// shares the host's filesystem view by design and never takes a resolver:
// it runs jobs whose image is "" or "host" only.
func (c Config) WithImages(r image.Resolver) Config { c.images = r; return c }

// admitImage refuses an image the tier cannot run.
func (t *Tier) admitImage(job *airlock.Job) error {
	if job.Image == "" || job.Image == image.Host || t.images != nil {
		return nil
	}
	reason := fmt.Sprintf("tier %s has no image store: it runs the host view only (image \"\" or %q), not %q", t.name, image.Host, job.Image)
	if !t.lv.ownFS() {
		reason = fmt.Sprintf("tier %s shares the host's filesystem view and cannot run an image: image \"\" or %q only, not %q", t.name, image.Host, job.Image)
	}
	return &airlock.NotAdmitted{Tier: t.name, Reason: reason}
}

// imageError is a failed Acquire as the job's error: an invalid job for a
// bad or unknown reference, else the tier's failure.
func imageError(err error) error {
	var ie *image.Error
	if errors.As(err, &ie) && ie.Invalid {
		return jobs.Invalid("image", "%q: %v", ie.Ref, ie.Err)
	}
	return fmt.Errorf("starting sandbox: %w", err)
}

// poolRef returns the pool key of ref's image ("": the default),
// acquiring it the first time to learn its digest: only the configured
// images are kept warm, and a reference's image is learned once, then
// followed as jobs and pooled starts find it moved (see follow).
func (t *Tier) poolRef(ctx context.Context, ref string) (poolKey, error) {
	if k, ok := t.known(ref); ok {
		return k, nil
	}
	t.defLearn.Lock()
	defer t.defLearn.Unlock()
	if k, ok := t.known(ref); ok {
		return k, nil
	}
	img := &image.Image{Ref: image.Host} // the host view, keyed ""
	if t.images != nil {
		var release func()
		var err error
		img, release, err = t.images.Acquire(ctx, ref)
		if err != nil {
			return poolKey{}, fmt.Errorf("warming pool of image %q: %w", ref, err)
		}
		release()
	}
	t.follow(ref, img)
	k, _ := t.known(ref)
	return k, nil
}

// follow makes img the image of ref's pool: its sandboxes are kept warm,
// and those of the image ref named before no longer (unless another
// reference still names it), so a catalogue name moved to a new image is
// never served a sandbox of the old one. A reference without a pool is
// ignored.
func (t *Tier) follow(ref string, img *image.Image) {
	if t.pool == nil || t.sizeOf(ref) == 0 {
		return
	}
	k := poolKey{img.Digest} // "" without a resolver
	t.defMu.Lock()
	defer t.defMu.Unlock()
	t.refNames[ref] = img.Ref
	old, set := t.refKeys[ref]
	if set && old == k {
		return
	}
	t.refKeys[ref] = k
	if set {
		t.resize(old)
	}
	t.resize(k)
}

// resize gives k the largest size of the references naming its image now
// (0 when none does, which ends its pool); t.defMu is held.
func (t *Tier) resize(k poolKey) {
	n := 0
	delete(t.poolRefs, k)
	for r, rk := range t.refKeys {
		if rk == k && t.sizeOf(r) > n {
			n = t.sizeOf(r)
			t.poolRefs[k] = r
		}
	}
	t.pool.SetSize(k, n)
}

// nameOf is the name ref's image was resolved from ("": the default's).
func (t *Tier) nameOf(ref string) string {
	t.defMu.Lock()
	defer t.defMu.Unlock()
	if n := t.refNames[ref]; n != "" {
		return n
	}
	return ref
}

// appendName adds name to names once, keeping them sorted.
func appendName(names []string, name string) []string {
	if name == "" || slices.Contains(names, name) {
		return names
	}
	names = append(names, name)
	slices.Sort(names)
	return names
}

// known returns the pool key of ref's image once it is known.
func (t *Tier) known(ref string) (poolKey, bool) {
	t.defMu.Lock()
	defer t.defMu.Unlock()
	k, ok := t.refKeys[ref]
	return k, ok
}

// knownDefault returns the default image's pool key once it is known.
func (t *Tier) knownDefault() (poolKey, bool) { return t.known("") }

// pooled reports whether k is the key of a configured image's pool.
func (t *Tier) pooled(k poolKey) bool {
	t.defMu.Lock()
	defer t.defMu.Unlock()
	_, ok := t.poolRefs[k]
	return ok
}

// pooledRefs returns the references whose images are kept warm, the
// default's ("") first when it is.
func (t *Tier) pooledRefs() []string {
	var refs []string
	if t.cfg.poolSize > 0 {
		refs = append(refs, "")
	}
	return append(refs, slices.Sorted(maps.Keys(t.cfg.imgPools))...)
}

// sizeOf is the configured pool size of ref's image.
func (t *Tier) sizeOf(ref string) int {
	if ref == "" {
		return t.cfg.poolSize
	}
	return t.cfg.imgPools[ref]
}

// startPooled starts a pooled container of k's image: the reference that
// named it is acquired again, and a start fails if it no longer names k's.
func (t *Tier) startPooled(ctx context.Context, k poolKey) (*sandbox, error) {
	// Every pooled sandbox has the (empty) egress directory bound: whether
	// its job has a net grant is known only at claim time.
	o := startOptions{limits: poolLimits, scratchMB: DefaultScratchMB, egress: true}
	if t.images != nil {
		t.defMu.Lock()
		ref, ok := t.poolRefs[k]
		t.defMu.Unlock()
		if !ok {
			return nil, fmt.Errorf("starting sandbox: no image names the pool of %s now", k.digest)
		}
		img, release, err := t.images.Acquire(ctx, ref)
		if err != nil {
			return nil, fmt.Errorf("starting sandbox: %w", err)
		}
		if img.Digest != k.digest {
			release()
			t.follow(ref, img) // the pool moves with the name
			return nil, fmt.Errorf("starting sandbox: image %q is %s, not the pool's %s", ref, img.Digest, k.digest)
		}
		o.img, o.releaseImage = img, release
	}
	sb, err := t.start(ctx, o)
	if err != nil {
		return nil, err
	}
	sb.key = k
	return sb, nil
}

// imageEnv is a program's environment in img (see image.Image.Environ);
// the host view has the baseline and over (image.Baseline), as on every
// tier.
func imageEnv(img *image.Image, over []string) []string {
	if img.IsHost() {
		return image.Baseline(over...)
	}
	return img.Environ(over...)
}
