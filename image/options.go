package image

import (
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
)

// DefaultMaxBytes is the store's size cap when Options leaves it zero.
const DefaultMaxBytes = 20 << 30

// DefaultName is the image a job gets when it names none and Options sets
// no Default.
const DefaultName = "python"

// Options configure a Store. The zero value is a store of DefaultMaxBytes
// that accepts catalogue names and references pinned by digest, pulled
// anonymously.
type Options struct {
	// MaxBytes caps the store: the unpacked size of one image, and the
	// total above which images pulled by digest are evicted, least recently
	// used first. An image counts its files' content (a hard-linked file's
	// once) and 4 KiB for every name. 0 means DefaultMaxBytes.
	MaxBytes int64
	// AllowTags accepts a registry reference with a tag and no digest
	// (resolved at each Acquire). Without it such a reference is refused:
	// a job's image must not change under it.
	AllowTags bool
	// AllowHost offers Host, the host's own software, as an image.
	AllowHost bool
	// Default is the name or reference used for a job that names none;
	// empty means DefaultName.
	Default string
	// AuthFile names a file of registry credentials for pulls, in the
	// format of docker's config.json: {"auths": {"registry.example":
	// {"registrytoken": "…"}}}, an entry holding a bearer token
	// (registrytoken), an OAuth2 refresh token (identitytoken), or a user
	// and password (auth, base64 of user:password, or username and
	// password) that the registry's token service exchanges for a token.
	// A registry the file does not name is pulled from anonymously, so a
	// credential only ever goes to its own registry; credential helpers
	// (credsStore, credHelpers) are not run. The file is read at each
	// pull (a rotated token is used at once) and must not be readable by
	// group or others.
	AuthFile string
	// Keychain gives credentials for pulls, after AuthFile's; with
	// neither, pulls are anonymous.
	Keychain authn.Keychain
	// Progress, when set, is told how a pull, unpack or derive advances
	// (a terminal shows it). It is called from the working goroutine and
	// must return quickly.
	Progress func(Event)
}

// Event is a step of the work on one image, for Options.Progress.
type Event struct {
	// Image is the reference or name being worked on.
	Image string
	// Phase is "pull" (fetching the manifest), "unpack" (layers, Done and
	// Total in compressed bytes), "derive" (a tier's artefact, Kind, is
	// being built), "derived" (built, in Took) or "done".
	Phase string
	// Layer is the 1-based layer being unpacked, of Layers.
	Layer, Layers int
	Done, Total   int64
	Kind          string
	Took          time.Duration
}

// Info describes an image in the store, for List.
type Info struct {
	Digest string
	// Names are the catalogue names pointing at the image; an image with a
	// name is evicted only by Remove.
	Names []string
	// Refs are the registry references it was pulled by.
	Refs []string
	// Size is the unpacked size in bytes, derived artefacts included.
	Size int64
	// LastUse is the last Acquire (or the unpack, if never acquired).
	LastUse time.Time
	// Held reports whether an Acquire holds it (in any process).
	Held bool
	// Labels are the image configuration's labels.
	Labels map[string]string
}
