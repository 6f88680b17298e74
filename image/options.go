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
	// used first. 0 means DefaultMaxBytes.
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
	// Keychain gives credentials for pulls; nil pulls anonymously.
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
