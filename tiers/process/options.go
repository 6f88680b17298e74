package process

// option adjusts how a tier starts its sandboxes beyond what its Config
// says. Only the package's own constructors take options: the tests and
// benchmarks use them to exercise or compare the other ways of starting.
type option func(*options)

type options struct {
	// directStarts starts every stage from this process, never through
	// the spawner (the way a tier starts when no spawner can be had).
	directStarts bool
	// parentMoves has the parent move every stage into its cgroup after
	// it started, instead of the stage joining it or being born in it.
	parentMoves bool
	// etcWatch is the directory whose changes rebuild the containers'
	// /etc template.
	etcWatch string
}

func buildOptions(opts []option) options {
	o := options{etcWatch: "/etc"}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// withDirectStarts starts every stage from the tier's own process.
func withDirectStarts(on bool) option { return func(o *options) { o.directStarts = on } }

// withParentMoves has the tier move each stage into its cgroup itself.
func withParentMoves(on bool) option { return func(o *options) { o.parentMoves = on } }

// withEtcWatch rebuilds the /etc template on changes to dir rather than
// to /etc.
func withEtcWatch(dir string) option { return func(o *options) { o.etcWatch = dir } }
