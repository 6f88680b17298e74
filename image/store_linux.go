package image

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/image/catalogue"
	"github.com/airlock-sandbox/airlock/internal/statedir"
)

// Store is a content-addressed image store in one directory, shared safely
// by the processes that open it. Its layout:
//
//	lock                 serialises the names table, eviction and clean-up
//	names.json           catalogue names and pulled references → digest
//	locks/<hex>          serialises the unpack (and derives) of one image
//	images/<hex>/        one image, by manifest digest: image.json (its
//	                     configuration and size; its mtime is the last use),
//	                     root/ (the unpacked root), derived/<kind>/
//	tmp/                 work in progress, renamed into place when complete
//
// Every image, artefact and table is built under tmp/ and renamed into
// place only when whole, so an interrupted pull, unpack or derive leaves
// nothing that a later run uses; Open removes what such a run left in tmp/.
// An Acquire holds a shared lock on the image's image.json until released;
// eviction and Remove take it exclusively and skip (or refuse) a held image,
// in this process or another.
type Store struct {
	dir  string
	opts Options

	mu      sync.Mutex
	flights map[string]*flight

	unpacks atomic.Int64 // images unpacked, for tests
	builds  atomic.Int64 // artefacts derived, for tests
	waiting atomic.Int64 // callers waiting on another's flight, for tests

	// inflight is what the unpacks of this process in progress may write
	// in all (see inflightShare).
	inflight *sharedBudget
}

type flight struct {
	done chan struct{}
	err  error
	// gaveUp is set when the caller doing the work had its context end:
	// its error (a cancellation, or a build killed for it) is its own.
	gaveUp bool
}

var _ Resolver = (*Store)(nil)

// inflightShare bounds what the unpacks of one process in progress may
// write in all, in MaxBytes: each may write up to MaxBytes before eviction
// runs, and however many images jobs name at once, the store's directory
// holds at most MaxBytes (kept) plus this many times MaxBytes (in
// progress). An unpack that would go beyond fails (the store's condition,
// not the image's); one that writes slowly keeps no other waiting.
const inflightShare = 2

// Open opens (creating it if needed) the store in dir and removes what an
// interrupted run left in it.
func Open(dir string, opts Options) (*Store, error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.AuthFile != "" {
		// Checked now, so a bad file stops the start rather than the
		// first pull.
		if _, err := (authFile{opts.AuthFile}).read(); err != nil {
			return nil, fmt.Errorf("image store: %w", err)
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	if _, err := statedir.Ensure(dir, 0o755); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	for _, d := range []string{"tmp", "locks", "images"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("image store: %w", err)
		}
	}
	s := &Store{dir: dir, opts: opts, flights: map[string]*flight{}, inflight: &sharedBudget{max: inflightShare * opts.MaxBytes}}
	unlock, err := s.lockStore()
	if err != nil {
		return nil, err
	}
	defer unlock()
	s.cleanTmp()
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// AuthFile is the registry credentials file of pulls (Options.AuthFile),
// which a server keeps out of every job's reach.
func (s *Store) AuthFile() string { return s.opts.AuthFile }

// AllowsHost reports whether the store offers the host view (Host).
func (s *Store) AllowsHost() bool { return s.opts.AllowHost }

// Default is the image a job naming none runs in.
func (s *Store) Default() string { return s.defaultRef() }

func (s *Store) defaultRef() string {
	if s.opts.Default != "" {
		return s.opts.Default
	}
	return DefaultName
}

func (s *Store) emit(ev Event) {
	if s.opts.Progress != nil {
		s.opts.Progress(ev)
	}
}

// Acquire implements Resolver: ref is a catalogue name, a reference pinned
// by digest (pulled if the store lacks it), a tagged reference where
// Options.AllowTags, Host where Options.AllowHost, or "" for the default.
func (s *Store) Acquire(ctx context.Context, ref string) (*Image, func(), error) {
	if ref == "" {
		ref = s.defaultRef()
	}
	if ref == Host {
		if !s.opts.AllowHost {
			return nil, nil, &Error{Ref: ref, Invalid: true, Err: errors.New("the host view is not enabled")}
		}
		return &Image{Ref: Host, Digest: Host}, func() {}, nil
	}
	for attempt := 0; ; attempt++ {
		digest, pulled, err := s.resolve(ctx, ref)
		if err != nil {
			return nil, nil, wrap(ref, err)
		}
		img, release, err := s.hold(ref, digest)
		if errors.Is(err, errGone) && attempt < 3 {
			continue // evicted or removed between resolving and holding
		}
		if err != nil {
			return nil, nil, wrap(ref, err)
		}
		if pulled {
			s.evict() // after hold, so the image just pulled stays
		}
		return img, release, nil
	}
}

var (
	errGone    = errors.New("not in the store")
	errInvalid = errors.New("invalid")
	// errNotASCII refuses a reference printableASCII refuses.
	errNotASCII = fmt.Errorf("%w: not ASCII (a registry's international name is written in its xn-- form)", errInvalid)
	nameRE      = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`) })
	kindRE      = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`) })
)

// isName reports whether ref is a catalogue name rather than a registry
// reference: a name has no '/', ':' or '@'.
func isName(ref string) bool { return !strings.ContainsAny(ref, "/:@") }

func invalidf(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errInvalid}, a...)...)
}

// wrap makes err an *Error about ref, Invalid when the image or the
// reference is at fault rather than the store.
func wrap(ref string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	invalid := errors.Is(err, errInvalid) || errors.Is(err, errHostile) || errors.Is(err, errTooLarge) || errors.Is(err, errReach)
	msg := err.Error()
	if errors.Is(err, errInvalid) {
		msg = strings.TrimPrefix(msg, errInvalid.Error()+": ")
		err = errors.New(msg)
	}
	return &Error{Ref: ref, Invalid: invalid, Err: err}
}

// resolve returns ref's digest, pulling the image if the store lacks it.
func (s *Store) resolve(ctx context.Context, ref string) (digest string, pulled bool, err error) {
	tbl, err := s.readTable()
	if err != nil {
		return "", false, err
	}
	d, r, err := s.lookup(tbl, ref)
	if err != nil || d != "" {
		return d, false, err
	}
	d, err = s.pull(ctx, ref, r)
	return d, err == nil, err
}

// lookup returns the digest of ref in the store, or, for a reference the
// store would pull, no digest and the parsed reference.
func (s *Store) lookup(tbl table, ref string) (string, name.Reference, error) {
	if d, ok := tbl.Names[ref]; ok {
		if !s.has(d) {
			return "", nil, fmt.Errorf("named %s but missing from the store; import it again", d)
		}
		return d, nil, nil
	}
	if _, ok := hexOf(ref); ok {
		if s.has(ref) {
			return ref, nil, nil
		}
		return "", nil, invalidf("unknown digest (name it with its repository to pull it)")
	}
	if isName(ref) {
		if slices.Contains(catalogue.Names(), ref) {
			return "", nil, invalidf("unknown image name: not built here (build it: airlock image build %s)", ref)
		}
		return "", nil, invalidf("unknown image name (airlock images lists the names; the catalogue builds %s)", strings.Join(catalogue.Names(), ", "))
	}
	if !printableASCII(ref) {
		return "", nil, errNotASCII
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", nil, invalidf("malformed reference: %v", err)
	}
	if dr, ok := r.(name.Digest); ok {
		if s.has(dr.DigestStr()) {
			return dr.DigestStr(), nil, nil
		}
		if d, ok := tbl.Refs[ref]; ok && s.has(d) {
			return d, nil, nil
		}
	} else if !s.opts.AllowTags {
		return "", nil, invalidf("not pinned by digest (name@sha256:…)")
	}
	return "", r, nil
}

// Check tells, without pulling anything, whether Acquire would refuse ref
// ("" for the default) as invalid, unknown or not allowed: nil for an
// image the store has or would pull. The error is Acquire's.
func (s *Store) Check(ref string) error {
	if ref == "" {
		ref = s.defaultRef()
	}
	if ref == Host {
		if !s.opts.AllowHost {
			return &Error{Ref: ref, Invalid: true, Err: errors.New("the host view is not enabled")}
		}
		return nil
	}
	tbl, err := s.readTable()
	if err == nil {
		_, _, err = s.lookup(tbl, ref)
	}
	if err != nil {
		return wrap(ref, err)
	}
	return nil
}

// Current returns the digest ref ("" for the default) names in the store
// now, without pulling anything: "" for a reference the store would pull
// first, [Host] for the host view. Approvals bind a job to it, so that a
// name moved after the approval is another job.
func (s *Store) Current(ref string) (string, error) {
	if ref == "" {
		ref = s.defaultRef()
	}
	if ref == Host {
		return Host, nil
	}
	tbl, err := s.readTable()
	if err != nil {
		return "", wrap(ref, err)
	}
	d, _, err := s.lookup(tbl, ref)
	if err != nil {
		return "", wrap(ref, err)
	}
	return d, nil
}

func hexOf(digest string) (string, bool) {
	h, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(h) != 64 {
		return "", false
	}
	if _, err := hex.DecodeString(h); err != nil || strings.ToLower(h) != h {
		return "", false
	}
	return h, true
}

func (s *Store) imageDir(digest string) string {
	h, _ := hexOf(digest)
	return filepath.Join(s.dir, "images", h)
}

func (s *Store) has(digest string) bool {
	if _, ok := hexOf(digest); !ok {
		return false
	}
	_, err := os.Stat(filepath.Join(s.imageDir(digest), "image.json"))
	return err == nil
}

// meta is an image's image.json.
type meta struct {
	Digest string `json:"digest"`
	Config Config `json:"config"`
	Size   int64  `json:"size"`
	// Labels are the image configuration's labels, for List.
	Labels map[string]string `json:"labels,omitempty"`
}

// hold locks the image shared, so no eviction or Remove takes it, and
// records the use.
func (s *Store) hold(ref, digest string) (*Image, func(), error) {
	if _, ok := hexOf(digest); !ok {
		return nil, nil, errGone
	}
	p := filepath.Join(s.imageDir(digest), "image.json")
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, errGone
	}
	if err != nil {
		return nil, nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("locking: %w", err)
	}
	// Locked: check it was not moved away before the lock was taken.
	fi, err1 := f.Stat()
	pi, err2 := os.Stat(p)
	if err1 != nil || err2 != nil || !os.SameFile(fi, pi) {
		f.Close()
		return nil, nil, errGone
	}
	var m meta
	if err := json.NewDecoder(f).Decode(&m); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("reading image.json: %w", err)
	}
	now := time.Now()
	os.Chtimes(p, now, now)
	var once sync.Once
	release := func() { once.Do(func() { f.Close() }) }
	return &Image{Ref: ref, Digest: digest, Root: filepath.Join(s.imageDir(digest), "root"), Config: m.Config}, release, nil
}

// Pull fetches ref from its registry (linux/amd64 from an index) and
// unpacks it, returning the manifest's digest. A tag without a digest is
// refused unless Options.AllowTags.
func (s *Store) Pull(ctx context.Context, ref string) (string, error) {
	if !printableASCII(ref) {
		return "", wrap(ref, errNotASCII)
	}
	r, err := name.ParseReference(ref)
	if err != nil || isName(ref) {
		return "", &Error{Ref: ref, Invalid: true, Err: errors.New("malformed reference")}
	}
	if _, ok := r.(name.Digest); !ok && !s.opts.AllowTags {
		return "", &Error{Ref: ref, Invalid: true, Err: errors.New("not pinned by digest (name@sha256:…)")}
	}
	d, err := s.pull(ctx, ref, r)
	if err != nil {
		return "", wrap(ref, err)
	}
	s.evict()
	return d, nil
}

var amd64 = v1.Platform{OS: "linux", Architecture: "amd64"}

func (s *Store) pull(ctx context.Context, ref string, r name.Reference) (digest string, err error) {
	s.emit(Event{Image: ref, Phase: "pull"})
	// No credential sent or received may reach the error (a job's Result),
	// and the registry's redirects reach no further than pullPolicy lets
	// them.
	policy := newPullPolicy(ctx, r)
	tr := policy.reach.transport()
	defer tr.CloseIdleConnections()
	watch := newCredWatch(stallGuard{tr}, policy)
	defer func() { err = watch.clean(reachRefusal(err)) }()
	opts := []remote.Option{remote.WithContext(ctx), remote.WithPlatform(amd64), remote.WithTransport(watch)}
	var keys []authn.Keychain
	if s.opts.AuthFile != "" {
		keys = append(keys, authFile{s.opts.AuthFile})
		if creds, err := (authFile{s.opts.AuthFile}).read(); err == nil {
			if ac, ok := creds[r.Context().RegistryStr()]; ok {
				watch.addConfig(ac)
			}
		}
	}
	if s.opts.Keychain != nil {
		keys = append(keys, s.opts.Keychain)
	}
	if len(keys) > 0 {
		opts = append(opts, remote.WithAuthFromKeychain(authn.NewMultiKeychain(keys...)))
	} else {
		opts = append(opts, remote.WithAuth(authn.Anonymous))
	}
	desc, err := remote.Get(r, opts...)
	if err != nil {
		return "", s.pullError(r, err)
	}
	want := ""
	var img v1.Image
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return "", fmt.Errorf("pulling: %w", err)
		}
		img, want, err = selectImage(idx, 0, nil)
		if err != nil {
			return "", err
		}
	} else {
		if img, err = desc.Image(); err != nil {
			return "", fmt.Errorf("pulling: %w", err)
		}
		want = desc.Digest.String()
	}
	digest, err = s.ensure(ctx, ref, img, want, watch.clean)
	if err != nil {
		return "", err
	}
	err = s.updateTable(func(t *table) bool {
		if t.Refs[ref] == digest {
			return false
		}
		t.Refs[ref] = digest
		return true
	})
	return digest, err
}

// pullError is a failed manifest fetch as one line. A registry that
// refuses access (401, 403) when the store has credentials for it refuses
// those credentials: the operator's to fix. Without credentials, as for
// an unknown manifest (404), the job named an image it cannot have.
func (s *Store) pullError(r name.Reference, err error) error {
	var te *transport.Error
	if !errors.As(err, &te) {
		return fmt.Errorf("pulling: %w", err)
	}
	host := r.Context().RegistryStr()
	switch te.StatusCode {
	case http.StatusNotFound:
		return invalidf("not found in the registry (404)")
	case http.StatusUnauthorized, http.StatusForbidden:
		if s.opts.AuthFile != "" && (authFile{s.opts.AuthFile}).has(host) {
			return fmt.Errorf("registry %s refused the credentials for it in %s (%d %s)", host, s.opts.AuthFile, te.StatusCode, http.StatusText(te.StatusCode))
		}
		if s.opts.Keychain != nil {
			return fmt.Errorf("registry %s refused access (%d %s)", host, te.StatusCode, http.StatusText(te.StatusCode))
		}
		return invalidf("registry %s refused access (%d %s): not found, or not public and no credentials are configured for it", host, te.StatusCode, http.StatusText(te.StatusCode))
	}
	return fmt.Errorf("pulling: registry %s answered %d %s", host, te.StatusCode, http.StatusText(te.StatusCode))
}

// selectImage picks the linux/amd64 image of an index (or its only image).
// meta, when set, checks the picked blob before it is read (an import's
// layout: see layoutMeta).
func selectImage(idx v1.ImageIndex, depth int, meta func(what string, d v1.Descriptor) error) (v1.Image, string, error) {
	if depth > 4 {
		return nil, "", invalidf("indexes nested too deep")
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, "", fmt.Errorf("reading index: %w", err)
	}
	var pick *v1.Descriptor
	for i := range im.Manifests {
		d := &im.Manifests[i]
		if !d.MediaType.IsImage() && !d.MediaType.IsIndex() {
			continue
		}
		if d.Platform != nil && d.Platform.OS == amd64.OS && d.Platform.Architecture == amd64.Architecture {
			pick = d
			break
		}
		if d.Platform == nil && pick == nil {
			pick = d
		}
	}
	if pick == nil {
		return nil, "", invalidf("no linux/amd64 image in the index")
	}
	what := "manifest"
	if pick.MediaType.IsIndex() {
		what = "index"
	}
	if pick.Size > maxMeta {
		return nil, "", invalidf("%s %s of %d bytes, over the %d bytes it may have", what, pick.Digest, pick.Size, maxMeta)
	}
	if meta != nil {
		if err := meta(what, *pick); err != nil {
			return nil, "", err
		}
	}
	if pick.MediaType.IsIndex() {
		child, err := idx.ImageIndex(pick.Digest)
		if err != nil {
			return nil, "", fmt.Errorf("reading index: %w", err)
		}
		return selectImage(child, depth+1, meta)
	}
	img, err := idx.Image(pick.Digest)
	if err != nil {
		return nil, "", fmt.Errorf("reading image: %w", err)
	}
	return img, pick.Digest.String(), nil
}

// once runs fn once per key among the concurrent callers of this process;
// the file locks taken inside fn do the same across processes.
//
// A caller that gives up (its ctx ends) ends the work for itself only: a
// caller waiting on it then does the work in its turn, rather than fail
// with another's cancellation (one tenant cancelling its job must not
// fail another's of the same image).
func (s *Store) once(ctx context.Context, key string, fn func() error) error {
	s.mu.Lock()
	for {
		f, ok := s.flights[key]
		if !ok {
			break
		}
		s.mu.Unlock()
		s.waiting.Add(1)
		select {
		case <-f.done:
			s.waiting.Add(-1)
		case <-ctx.Done():
			s.waiting.Add(-1)
			return ctx.Err()
		}
		if f.err == nil || !f.gaveUp || ctx.Err() != nil {
			return f.err
		}
		s.mu.Lock()
	}
	f := &flight{done: make(chan struct{})}
	s.flights[key] = f
	s.mu.Unlock()
	f.err = fn()
	f.gaveUp = ctx.Err() != nil
	s.mu.Lock()
	delete(s.flights, key)
	s.mu.Unlock()
	close(f.done)
	return f.err
}

// ensure unpacks img into the store unless it is there, verifying its
// manifest against want (when known), its config against the manifest, and
// every layer against both. clean, when set, rewrites the unpack's error
// before it is shared with concurrent callers (a pull's: see credWatch).
func (s *Store) ensure(ctx context.Context, label string, img v1.Image, want string, clean func(error) error) (string, error) {
	raw, err := img.RawManifest()
	if err != nil {
		return "", fmt.Errorf("reading manifest: %w", err)
	}
	sum := sha256.Sum256(raw)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	if want != "" && want != digest {
		return "", fmt.Errorf("manifest digest mismatch: got %s, want %s", digest, want)
	}
	err = s.once(ctx, digest, func() error {
		lock, err := lockFileCtx(ctx, filepath.Join(s.dir, "locks", digest[7:]))
		if err != nil {
			return err
		}
		defer lock.Close()
		if s.has(digest) {
			return nil
		}
		err = s.unpack(ctx, label, digest, raw, img)
		if err != nil && clean != nil {
			err = clean(err)
		}
		return err
	})
	return digest, err
}

func (s *Store) unpack(ctx context.Context, label, digest string, raw []byte, img v1.Image) error {
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("parsing manifest: %w", err)
	}
	// The configuration is read whole into memory: its size must be
	// known and bounded before it is asked for.
	if m.Config.Data == nil && (m.Config.Size < 0 || m.Config.Size > maxMeta) {
		return invalidf("image configuration %s of %d bytes, over the %d bytes it may have", m.Config.Digest, m.Config.Size, maxMeta)
	}
	cfgRaw, err := img.RawConfigFile()
	if err != nil {
		return fmt.Errorf("reading config: %w", err)
	}
	if sum := sha256.Sum256(cfgRaw); "sha256:"+hex.EncodeToString(sum[:]) != m.Config.Digest.String() {
		return fmt.Errorf("config blob %s: digest mismatch (corrupt blob)", m.Config.Digest)
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(cfgRaw))
	if err != nil {
		return fmt.Errorf("parsing config: %w", err)
	}
	if (cfg.OS != "" && cfg.OS != amd64.OS) || (cfg.Architecture != "" && cfg.Architecture != amd64.Architecture) {
		return invalidf("built for %s/%s, not linux/amd64", cfg.OS, cfg.Architecture)
	}
	if err := checkEnv(cfg.Config.Env); err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("reading layers: %w", err)
	}
	if len(layers) != len(m.Layers) || len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		return fmt.Errorf("manifest has %d layers, config %d", len(m.Layers), len(cfg.RootFS.DiffIDs))
	}

	tmp, done, err := s.tempDir()
	if err != nil {
		return err
	}
	defer done()
	root := filepath.Join(tmp, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return err
	}
	u, err := newUnpacker(root, s.opts.MaxBytes, s.inflight)
	if err != nil {
		return err
	}
	defer u.close()
	var total int64
	for _, d := range m.Layers {
		total += d.Size
	}
	p := &progress{s: s, ev: Event{Image: label, Phase: "unpack", Layers: len(layers), Total: total}}
	stream := s.opts.MaxBytes
	for i, l := range layers {
		p.ev.Layer = i + 1
		n, err := s.applyLayer(ctx, u, l, m.Layers[i], cfg.RootFS.DiffIDs[i], stream, p)
		if err != nil {
			return fmt.Errorf("layer %d (%s): %w", i+1, m.Layers[i].Digest, err)
		}
		stream -= n
	}
	// The mount points the store adds count as the image's names do, so
	// that the image is within its cap as the store counts it.
	if err := u.charge(int64(len(MountPoints))*entryCost, "the mount points"); err != nil {
		return err
	}
	if err := addMountPoints(root); err != nil {
		return err
	}
	size, err := du(root)
	if err != nil {
		return err
	}
	c := Config{Env: cfg.Config.Env, WorkingDir: cfg.Config.WorkingDir, User: cfg.Config.User, Entrypoint: cfg.Config.Entrypoint, Cmd: cfg.Config.Cmd}
	js, _ := json.Marshal(meta{Digest: digest, Config: c, Size: size, Labels: cfg.Config.Labels})
	if err := os.WriteFile(filepath.Join(tmp, "image.json"), js, 0o644); err != nil {
		return err
	}
	// A directory without image.json is no image (an artefact's directory
	// made as the image went): it must not block the new one.
	if _, err := os.Lstat(s.imageDir(digest)); err == nil {
		if err := os.Rename(s.imageDir(digest), filepath.Join(s.dir, "tmp", "gone-"+randHex())); err != nil {
			return fmt.Errorf("placing image: %w", err)
		}
		s.cleanGone()
	}
	if err := os.Rename(tmp, s.imageDir(digest)); err != nil {
		return fmt.Errorf("placing image: %w", err)
	}
	s.unpacks.Add(1)
	p.ev.Phase, p.ev.Done = "done", total
	s.emit(p.ev)
	return nil
}

// maxEnvEntry and maxEnv bound an image's environment: an entry as the
// kernel bounds one string of a program's (MAX_ARG_STRLEN), the whole
// well within what every program of the image is started with.
const (
	maxEnvEntry = 128 << 10
	maxEnv      = 1 << 20
)

// checkEnv refuses an image environment that no program could be started
// with: an entry holding a NUL byte (which no exec can pass), or one too
// long, each job of the image failing on every tier. Entries without "="
// or with an empty name are skipped when the environment is made
// (Image.Environ).
func checkEnv(env []string) error {
	total := 0
	for i, kv := range env {
		if strings.IndexByte(kv, 0) >= 0 {
			return invalidf("image configuration: environment entry %d holds a NUL byte", i+1)
		}
		if len(kv) >= maxEnvEntry {
			return invalidf("image configuration: environment entry %d of %d bytes, over the %d bytes one may have", i+1, len(kv), maxEnvEntry)
		}
		if total += len(kv) + 1; total > maxEnv {
			return invalidf("image configuration: environment over %d bytes", maxEnv)
		}
	}
	return nil
}

type progress struct {
	s    *Store
	ev   Event
	last int64
}

func (p *progress) add(n int64) {
	p.ev.Done += n
	if p.ev.Done-p.last >= 1<<20 || p.ev.Done == p.ev.Total {
		p.last = p.ev.Done
		p.s.emit(p.ev)
	}
}

// applyLayer verifies and unpacks one layer, returning the uncompressed
// bytes read. stream caps those.
func (s *Store) applyLayer(ctx context.Context, u *unpacker, l v1.Layer, desc v1.Descriptor, diffID v1.Hash, stream int64, p *progress) (int64, error) {
	rc, err := l.Compressed()
	if err != nil {
		return 0, fmt.Errorf("opening blob: %w", err)
	}
	defer rc.Close()
	ch := sha256.New()
	limit := desc.Size
	if limit <= 0 {
		limit = s.opts.MaxBytes
	}
	craw := &meter{ctx: ctx, r: rc, limit: limit, over: errors.New("blob longer than its descriptor (corrupt blob)"), p: p}
	cr := io.TeeReader(craw, ch)
	dec, err := decompress(cr)
	if err != nil {
		return 0, s.blobError(err, craw, ch, desc)
	}
	defer dec.Close()
	uh := sha256.New()
	um := &meter{ctx: ctx, r: dec, limit: stream, over: fmt.Errorf("%w: uncompressed image exceeds the size cap of %d bytes", errTooLarge, s.opts.MaxBytes)}
	ur := io.TeeReader(um, uh)
	err = u.apply(ur)
	if err == nil {
		// What follows the tar's end is part of the digest.
		_, err = io.Copy(io.Discard, ur)
	}
	err = zstdTooLarge(err)
	if err != nil {
		if errors.Is(err, errHostile) || errors.Is(err, errTooLarge) || errors.Is(err, errBusy) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return um.n, err
		}
		return um.n, s.blobError(err, craw, ch, desc)
	}
	if err := s.blobError(nil, craw, ch, desc); err != nil {
		return um.n, err
	}
	if got := "sha256:" + hex.EncodeToString(uh.Sum(nil)); got != diffID.String() {
		return um.n, fmt.Errorf("uncompressed digest %s does not match the config's %s (corrupt blob)", got, diffID)
	}
	return um.n, nil
}

// blobError drains the compressed stream and explains a failure by its
// length and digest: a truncated or corrupt blob, or else err.
func (s *Store) blobError(err error, m *meter, h interface{ Sum([]byte) []byte }, desc v1.Descriptor) error {
	_, derr := io.Copy(io.Discard, io.TeeReader(m, h.(io.Writer)))
	if errors.Is(derr, context.Canceled) || errors.Is(derr, context.DeadlineExceeded) || errors.Is(derr, errStalled) {
		return derr
	}
	if desc.Size > 0 && m.n < desc.Size {
		return fmt.Errorf("truncated blob (%d of %d bytes)", m.n, desc.Size)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != desc.Digest.String() {
		return fmt.Errorf("digest mismatch: got %s (corrupt blob)", got)
	}
	if err == nil {
		err = derr
	}
	if err != nil {
		return fmt.Errorf("reading blob: %w", err)
	}
	return nil
}

// meter counts what is read, fails past limit and when ctx ends.
type meter struct {
	ctx   context.Context
	r     io.Reader
	n     int64
	limit int64
	over  error
	p     *progress
}

func (m *meter) Read(b []byte) (int, error) {
	if err := m.ctx.Err(); err != nil {
		return 0, err
	}
	if m.n > m.limit {
		return 0, m.over
	}
	if room := m.limit - m.n + 1; int64(len(b)) > room {
		b = b[:room]
	}
	k, err := m.r.Read(b)
	m.n += int64(k)
	if m.p != nil {
		m.p.add(int64(k))
	}
	if m.n > m.limit {
		return k, m.over
	}
	return k, err
}

// du is what dir takes as the store counts it, as the unpacker charged
// it: entryCost for every name below it (an inode, a directory's entry),
// and the content of every file and symlink once, however many hard links
// name it. It walks by descriptor, never building a full path: an image's
// names may be thousands of elements deep.
func du(dir string) (int64, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	return duAt(fd, map[uint64]bool{})
}

// duAt counts dir's names; linked holds the inodes of more than one name
// already counted.
func duAt(dir int, linked map[uint64]bool) (int64, error) {
	names, err := readDirNames(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		n += entryCost
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG, unix.S_IFLNK:
			if st.Nlink > 1 {
				if linked[st.Ino] {
					continue
				}
				linked[st.Ino] = true
			}
			n += st.Size
		case unix.S_IFDIR:
			sub, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return 0, err
			}
			m, err := duAt(sub, linked)
			unix.Close(sub)
			if err != nil {
				return 0, err
			}
			n += m
		}
	}
	return n, nil
}

// Derive implements Resolver: the artefact lives in the image's directory
// and goes with it.
func (s *Store) Derive(ctx context.Context, img *Image, kind string, build func(dir string) error) (string, error) {
	if img == nil || img.IsHost() {
		return "", &Error{Ref: Host, Err: errors.New("the host view has no derived artefacts")}
	}
	if !kindRE().MatchString(kind) {
		return "", &Error{Ref: img.Ref, Err: fmt.Errorf("malformed artefact kind %q", kind)}
	}
	if !s.has(img.Digest) {
		return "", &Error{Ref: img.Ref, Err: errGone}
	}
	out := filepath.Join(s.imageDir(img.Digest), "derived", kind)
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	err := s.once(ctx, img.Digest+"/"+kind, func() error {
		lock, err := lockFileCtx(ctx, filepath.Join(s.dir, "locks", img.Digest[7:]+"."+kind))
		if err != nil {
			return err
		}
		defer lock.Close()
		if _, err := os.Stat(out); err == nil {
			return nil
		}
		tmp, done, err := s.tempDir()
		if err != nil {
			return err
		}
		defer done()
		s.emit(Event{Image: img.Ref, Phase: "derive", Kind: kind})
		start := time.Now()
		if err := build(tmp); err != nil {
			return fmt.Errorf("deriving %s: %w", kind, err)
		}
		s.emit(Event{Image: img.Ref, Phase: "derived", Kind: kind, Took: time.Since(start)})
		// Mkdir, not MkdirAll: an image removed meanwhile is not made again.
		if err := os.Mkdir(filepath.Dir(out), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := os.Rename(tmp, out); err != nil {
			return fmt.Errorf("placing %s: %w", kind, err)
		}
		s.builds.Add(1)
		return nil
	})
	if err != nil {
		return "", wrap(img.Ref, err)
	}
	return out, nil
}

// table is names.json.
type table struct {
	Names map[string]string `json:"names"`
	Refs  map[string]string `json:"refs"`
}

func (s *Store) readTable() (table, error) {
	t := table{Names: map[string]string{}, Refs: map[string]string{}}
	b, err := os.ReadFile(filepath.Join(s.dir, "names.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return t, nil
	}
	if err == nil {
		err = json.Unmarshal(b, &t)
	}
	if err != nil {
		return t, fmt.Errorf("reading names table: %w", err)
	}
	if t.Names == nil {
		t.Names = map[string]string{}
	}
	if t.Refs == nil {
		t.Refs = map[string]string{}
	}
	return t, nil
}

// updateTable changes the names table under the store lock; change reports
// whether it changed anything.
func (s *Store) updateTable(change func(*table) bool) error {
	unlock, err := s.lockStore()
	if err != nil {
		return err
	}
	defer unlock()
	t, err := s.readTable()
	if err != nil {
		return err
	}
	if !change(&t) {
		return nil
	}
	return s.writeTable(t)
}

// writeTable replaces names.json whole; the caller holds the store lock.
func (s *Store) writeTable(t table) error {
	b, _ := json.MarshalIndent(t, "", "  ")
	tmp := filepath.Join(s.dir, "tmp", "names-"+randHex())
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("writing names table: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "names.json")); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing names table: %w", err)
	}
	return nil
}

func randHex() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func lockFile(path string, how int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock: %w", err)
	}
	return f, nil
}

// lockFileCtx is lockFile(path, unix.LOCK_EX) that stops waiting when
// ctx ends: another process may hold an image's lock for as long as its
// unpack or build takes, and a job waiting on it must end with its own
// context, not with the other's work.
func lockFileCtx(ctx context.Context, path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	for delay := time.Millisecond; ; {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if err != unix.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("lock: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// lockStore takes the store-wide lock.
func (s *Store) lockStore() (func(), error) {
	f, err := lockFile(filepath.Join(s.dir, "lock"), unix.LOCK_EX)
	if err != nil {
		return nil, err
	}
	return func() { f.Close() }, nil
}

// tempDir makes a directory under tmp/ that clean-up leaves alone while
// this process holds its lock file.
func (s *Store) tempDir() (string, func(), error) {
	unlock, err := s.lockStore()
	if err != nil {
		return "", nil, err
	}
	defer unlock()
	dir := filepath.Join(s.dir, "tmp", randHex())
	lock, err := lockFile(dir+".lock", unix.LOCK_EX)
	if err != nil {
		return "", nil, err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		lock.Close()
		os.Remove(dir + ".lock")
		return "", nil, err
	}
	return dir, func() {
		os.RemoveAll(dir)
		os.Remove(dir + ".lock")
		lock.Close()
	}, nil
}

// cleanTmp removes what no live tempDir owns; the caller holds the store
// lock.
func (s *Store) cleanTmp() {
	tmp := filepath.Join(s.dir, "tmp")
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		if strings.HasSuffix(n, ".lock") {
			if _, err := os.Lstat(filepath.Join(tmp, strings.TrimSuffix(n, ".lock"))); err == nil {
				continue // handled with its directory
			}
			n = strings.TrimSuffix(n, ".lock")
		}
		p := filepath.Join(tmp, n)
		if f, err := os.OpenFile(p+".lock", os.O_RDWR, 0); err == nil {
			if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
				f.Close()
				continue // in use
			}
			os.RemoveAll(p)
			os.Remove(p + ".lock")
			f.Close()
			continue
		}
		os.RemoveAll(p)
	}
}

// Import adds the image in src under name: an OCI image layout directory,
// or a tarball of one, or a docker-archive (as docker save writes). It
// returns the image's digest. The name then resolves to this digest, and
// the image is evicted only by Remove.
func (s *Store) Import(ctx context.Context, name, src string) (string, error) {
	if !nameRE().MatchString(name) || name == Host {
		return "", &Error{Ref: name, Invalid: true, Err: errors.New("malformed name (lower-case letters, digits, '.', '_', '-')")}
	}
	for attempt := 0; ; attempt++ {
		d, err := s.importFrom(ctx, name, src)
		if err != nil {
			return "", wrap(name, err)
		}
		err = s.updateTable(func(t *table) bool {
			t.Names[name] = d
			return true
		})
		if err != nil {
			return "", wrap(name, err)
		}
		// Until named, the image was anyone's to evict (another process
		// over the cap): once named it stays, so a second unpack keeps it.
		if s.has(d) || attempt == 2 {
			s.evict()
			return d, nil
		}
	}
}

// Remove drops a name, or every name and reference of a digest, and the
// image once nothing names it. It refuses while the image is held.
func (s *Store) Remove(ctx context.Context, nameOrDigest string) error {
	unlock, err := s.lockStore()
	if err != nil {
		return wrap(nameOrDigest, err)
	}
	defer unlock()
	t, err := s.readTable()
	if err != nil {
		return wrap(nameOrDigest, err)
	}
	digest, named := t.Names[nameOrDigest]
	if !named {
		if _, ok := hexOf(nameOrDigest); ok && s.has(nameOrDigest) {
			digest = nameOrDigest
		} else if d, ok := t.Refs[nameOrDigest]; ok {
			digest = d
		} else {
			return &Error{Ref: nameOrDigest, Invalid: true, Err: errors.New("not in the store")}
		}
	}
	keep := false
	if named {
		for n, d := range t.Names {
			keep = keep || (d == digest && n != nameOrDigest)
		}
	}
	if !keep && s.has(digest) {
		if err := s.removeImage(digest); err != nil {
			return &Error{Ref: nameOrDigest, Err: err}
		}
	}
	if named {
		delete(t.Names, nameOrDigest)
	}
	if !keep {
		dropDigest(&t, digest)
	}
	if err := s.writeTable(t); err != nil {
		return wrap(nameOrDigest, err)
	}
	return nil
}

func dropDigest(t *table, digest string) {
	for n, d := range t.Names {
		if d == digest {
			delete(t.Names, n)
		}
	}
	for r, d := range t.Refs {
		if d == digest {
			delete(t.Refs, r)
		}
	}
}

// removeImage moves an image out of images/ and deletes it, unless an
// Acquire holds it; the caller holds the store lock.
func (s *Store) removeImage(digest string) error {
	dir := s.imageDir(digest)
	f, err := os.Open(filepath.Join(dir, "image.json"))
	if err != nil {
		return err
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return errors.New("in use")
	}
	trash := filepath.Join(s.dir, "tmp", "gone-"+randHex())
	if err := os.Rename(dir, trash); err != nil {
		return err
	}
	f.Close()
	os.RemoveAll(trash)
	return nil
}

// cleanGone removes what was moved to tmp/ to be deleted.
func (s *Store) cleanGone() {
	ents, _ := os.ReadDir(filepath.Join(s.dir, "tmp"))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "gone-") {
			os.RemoveAll(filepath.Join(s.dir, "tmp", e.Name()))
		}
	}
}

// List describes the images in the store.
func (s *Store) List() ([]Info, error) {
	t, err := s.readTable()
	if err != nil {
		return nil, err
	}
	return s.list(t)
}

func (s *Store) list(t table) ([]Info, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, "images"))
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	var out []Info
	for _, e := range ents {
		digest := "sha256:" + e.Name()
		dir := filepath.Join(s.dir, "images", e.Name())
		f, err := os.Open(filepath.Join(dir, "image.json"))
		if err != nil {
			continue
		}
		var m meta
		err = json.NewDecoder(f).Decode(&m)
		fi, _ := f.Stat()
		held := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil
		f.Close()
		if err != nil {
			continue
		}
		info := Info{Digest: digest, Size: m.Size, LastUse: fi.ModTime(), Held: held, Labels: m.Labels}
		if n, err := du(filepath.Join(dir, "derived")); err == nil {
			info.Size += n
		}
		for n, d := range t.Names {
			if d == digest {
				info.Names = append(info.Names, n)
			}
		}
		for r, d := range t.Refs {
			if d == digest {
				info.Refs = append(info.Refs, r)
			}
		}
		sort.Strings(info.Names)
		sort.Strings(info.Refs)
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LastUse.After(out[j].LastUse) })
	return out, nil
}

// evict removes the least recently used images that have no name and no
// holder until the store is within MaxBytes.
func (s *Store) evict() {
	unlock, err := s.lockStore()
	if err != nil {
		return
	}
	defer unlock()
	t, err := s.readTable()
	if err != nil {
		return
	}
	infos, err := s.list(t)
	if err != nil {
		return
	}
	var total int64
	for _, in := range infos {
		total += in.Size
	}
	changed := false
	for i := len(infos) - 1; i >= 0 && total > s.opts.MaxBytes; i-- {
		in := infos[i]
		if len(in.Names) > 0 || in.Held {
			continue
		}
		if s.removeImage(in.Digest) == nil {
			total -= in.Size
			dropDigest(&t, in.Digest)
			changed = true
		}
	}
	if changed {
		s.writeTable(t)
	}
}

// addMountPoints makes the MountPoints root lacks. One that is there in
// another form (a link, say) stays as the image has it: the tiers judge
// it.
func addMountPoints(root string) error {
	for _, p := range MountPoints {
		name := filepath.Join(root, filepath.FromSlash(strings.TrimSuffix(p, "/")))
		if _, err := os.Lstat(name); !os.IsNotExist(err) {
			continue
		}
		if st, err := os.Lstat(filepath.Dir(name)); err != nil || !st.IsDir() {
			continue // its parent is missing, or not a directory (a link is never followed)
		}
		var err error
		if strings.HasSuffix(p, "/") {
			if err = os.Mkdir(name, 0o755); err == nil {
				err = os.Chmod(name, 0o755)
			}
		} else {
			var f *os.File
			if f, err = os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
				err = f.Close()
			}
		}
		if err != nil {
			return fmt.Errorf("making mount point /%s: %w", p, err)
		}
	}
	return nil
}
