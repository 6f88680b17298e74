package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/image/catalogue"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/internal/statedir"
	"github.com/airlock-sandbox/airlock/internal/value"
)

func init() {
	register(&command{
		name:    "images",
		summary: "list the images in the image store: names, digest, size, last use; with --server, a running server's, with its warm sandboxes per tier",
		usage:   "images [--images DIR] [--json]\n       images --server URL --key-file FILE [--json]   (GET /v1/images: the images the key's tenant may use)",
		run:     imagesCmd,
	})
	register(&command{
		name:    "image",
		summary: "manage the image store: build NAME | import NAME SRC | pull REF | rm NAME|DIGEST",
		usage: "image [--images DIR] build [--force] NAME...  (a catalogue image from Debian packages, with mmdebstrap: " + strings.Join(catalogue.Names(), ", ") + ")\n" +
			"       image [--images DIR] import NAME SRC   (SRC: an OCI image layout directory, its tarball, or a docker-archive)\n" +
			"       image [--images DIR] [--registry-auth FILE] pull REF   (a registry reference pinned by digest)\n" +
			"       image [--images DIR] rm NAME|DIGEST",
		run: imageCmd,
	})
}

// catalogueCurrent maps each catalogue name the store holds, built from
// the recipe as it is now, to its digest.
func catalogueCurrent(st *image.Store) (map[string]string, error) {
	infos, err := st.List()
	if err != nil {
		return nil, err
	}
	recipes := catalogue.Recipes()
	cur := map[string]string{}
	for _, i := range infos {
		for _, n := range i.Names {
			if r, ok := recipes[n]; ok && i.Labels[catalogue.RecipeLabel] == r.Digest() {
				cur[n] = i.Digest
			}
		}
	}
	return cur, nil
}

// openStore opens (creating) the store for the image commands, printing
// progress to w.
func openStore(dir, auth string, w io.Writer) (*image.Store, error) {
	if dir == "" {
		dir = image.DefaultDir()
	}
	// Made as the store makes its directory: checked on the way down, so
	// that nothing is made where another user's link leads.
	abs, err := filepath.Abs(dir)
	if err == nil {
		_, err = statedir.Ensure(abs, 0o755)
	}
	if err != nil {
		return nil, fmt.Errorf("image store %s: %w (choose another with --images DIR or $%s)", dir, err, image.DirEnv)
	}
	return image.Open(dir, image.Options{AllowHost: true, Progress: imageProgress(w), AuthFile: auth})
}

// imageProgress is the progress a run shows on a terminal: a first disk
// build of a large image takes a while (nil when stderr is not one).
func (e *env) imageProgress() func(image.Event) {
	if f, ok := e.stderr.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			return imageProgress(e.stderr)
		}
	}
	return nil
}

// imageProgress prints the store's progress events to w: one line per
// phase and layer, enough to see that a large pull or a first disk build
// is moving without flooding a log.
func imageProgress(w io.Writer) func(image.Event) {
	var mu sync.Mutex
	var last string
	return func(ev image.Event) {
		var line string
		switch {
		case ev.Phase == "derive":
			line = fmt.Sprintf("building its %s (once per image)", ev.Kind)
		case ev.Phase == "derived":
			line = fmt.Sprintf("built its %s in %.1fs", ev.Kind, ev.Took.Seconds())
		case ev.Layers > 0:
			line = fmt.Sprintf("%s layer %d/%d", ev.Phase, ev.Layer, ev.Layers)
		default:
			line = ev.Phase
		}
		mu.Lock()
		defer mu.Unlock()
		if line != last {
			last = line
			fmt.Fprintf(w, "%s: %s\n", ev.Image, line)
		}
	}
}

// imageFail reports err with the exit code of its cause: a bad reference,
// a missing source or hostile content is invalid input (2), anything else
// airlock's (6).
func (e *env) imageFail(err error) int {
	fmt.Fprintf(e.stderr, "airlock: %v\n", err)
	var ie *image.Error
	if errors.As(err, &ie) && ie.Invalid || errors.Is(err, fs.ErrNotExist) {
		return exitUsage
	}
	return exitInternal
}

func imagesCmd(ctx context.Context, e *env) int {
	fs := e.flags(commands["images"])
	dir := fs.String("images", "", "image store `DIR` (default: $"+image.DirEnv+", else "+image.DefaultDir()+")")
	jsonMode := fs.Bool("json", false, "write the list as JSON")
	srvURL := fs.String("server", "", "list the images of a running airlock serve at base `URL` instead, with their warm sandboxes")
	keyFile := fs.String("key-file", "", "the `FILE` holding the tenant's API key, for --server (a key on the command line would show in ps)")
	pos, rest, code, ok := e.parse(fs)
	if !ok {
		return code
	}
	if len(pos)+len(rest) > 0 {
		return e.fail(jobs.Invalid("", "%s takes no arguments (see `airlock help %s`)", "images", "images"))
	}
	if *srvURL != "" {
		return serverImagesCmd(ctx, e, *srvURL, *keyFile, *jsonMode)
	}
	st, err := openStore(*dir, "", e.stderr)
	if err != nil {
		return e.imageFail(err)
	}
	infos, err := st.List()
	if err != nil {
		return e.imageFail(err)
	}
	if *jsonMode {
		list := make([]storeImage, 0, len(infos))
		for _, i := range infos {
			list = append(list, storeImage{Names: orEmpty(i.Names), Refs: orEmpty(i.Refs), Digest: i.Digest,
				SizeBytes: i.Size, LastUse: i.LastUse, Held: i.Held, Labels: i.Labels})
		}
		if err := writeJSON(e.stdout, list); err != nil {
			return e.fail(err)
		}
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMES\tDIGEST\tSIZE\tLAST USE")
	for _, i := range infos {
		names := strings.Join(append(i.Names, i.Refs...), ",")
		if names == "" {
			names = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f MB\t%s\n", names, i.Digest, float64(i.Size)/1e6, i.LastUse.Format(time.DateTime))
	}
	if err := tw.Flush(); err != nil {
		return e.fail(err)
	}
	return exitOK
}

// storeImage is one image of `airlock images --json`, in the words of the
// API's JSON (GET /v1/images): lower-case names, lists [] when empty.
type storeImage struct {
	Names     []string          `json:"names"`
	Refs      []string          `json:"refs"`
	Digest    string            `json:"digest"`
	SizeBytes int64             `json:"size_bytes"`
	LastUse   time.Time         `json:"last_use"`
	Held      bool              `json:"held"`
	Labels    map[string]string `json:"labels,omitempty"`
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func imageCmd(ctx context.Context, e *env) int {
	c := commands["image"]
	fs := e.flags(c)
	dir := fs.String("images", "", "image store `DIR` (default: $"+image.DirEnv+", else "+image.DefaultDir()+")")
	mirror := fs.String("mirror", catalogue.DefaultMirror, "the Debian archive `URL` build installs from")
	force := fs.Bool("force", false, "build even the names the store holds from the current recipe")
	_ = fs.Bool("missing", true, "build only the names the store lacks or holds from an older recipe (--force builds all)")
	var auth string
	registryAuthFlag(fs, &auth)
	pos, _, code, ok := e.parse(fs)
	if !ok {
		return code
	}
	want := map[string]int{"import": 3, "pull": 2, "rm": 2}
	if len(pos) >= 2 && pos[0] == "build" {
		want["build"] = len(pos)
	}
	takes := map[string]string{"build": "one or more NAMEs", "import": "NAME SRC", "pull": "REF", "rm": "NAME|DIGEST"}
	switch {
	case len(pos) == 0:
		return e.fail(jobs.Invalid("", "image takes a subcommand: build, import, pull or rm (see `airlock help image`)"))
	case takes[pos[0]] == "":
		return e.fail(jobs.Invalid("", "unknown subcommand %q: want build, import, pull or rm (see `airlock help image`)", pos[0]))
	case want[pos[0]] == 0 || len(pos) != want[pos[0]]:
		return e.fail(jobs.Invalid("", "image %s takes %s (see `airlock help image`)", pos[0], takes[pos[0]]))
	}
	st, err := openStore(*dir, auth, e.stderr)
	if err != nil {
		return e.imageFail(err)
	}
	switch pos[0] {
	case "build":
		recipes := catalogue.Recipes()
		for _, name := range pos[1:] {
			if _, ok := recipes[name]; !ok {
				fmt.Fprintf(e.stderr, "airlock: image %s: not in the catalogue (%s)\n", name, strings.Join(catalogue.Names(), ", "))
				return exitUsage
			}
		}
		var current map[string]string
		if !*force {
			if current, err = catalogueCurrent(st); err != nil {
				return e.imageFail(err)
			}
		}
		for _, name := range pos[1:] {
			if d, ok := current[name]; ok && d != "" {
				fmt.Fprintf(e.stderr, "%s: up to date, built from the current recipe (--force rebuilds it)\n", name)
				fmt.Fprintf(e.stdout, "%s %s\n", name, d)
				continue
			}
			fmt.Fprintf(e.stderr, "%s: building from Debian packages with mmdebstrap (a minute or more)\n", name)
			start := time.Now()
			work, err := os.MkdirTemp(st.Dir(), "catalogue-")
			if err != nil {
				return e.imageFail(err)
			}
			src, err := catalogue.Build(ctx, recipes[name], *mirror, work, e.stderr)
			if err == nil {
				var d string
				if d, err = st.Import(ctx, name, src); err == nil {
					fmt.Fprintf(e.stdout, "%s %s\n", name, d)
				}
			}
			os.RemoveAll(work)
			if err != nil {
				return e.imageFail(fmt.Errorf("image %s: %w", name, err))
			}
			fmt.Fprintf(e.stderr, "%s: built in %s\n", name, time.Since(start).Round(time.Second))
		}
	case "import":
		d, err := st.Import(ctx, pos[1], pos[2])
		if err != nil {
			return e.imageFail(err)
		}
		fmt.Fprintf(e.stdout, "%s %s\n", pos[1], d)
	case "pull":
		d, err := st.Pull(ctx, pos[1])
		if err != nil {
			return e.imageFail(err)
		}
		fmt.Fprintf(e.stdout, "%s %s\n", pos[1], d)
	case "rm":
		if err := st.Remove(ctx, pos[1]); err != nil {
			return e.imageFail(err)
		}
	}
	return exitOK
}

// serverImage is an entry of a server's GET /v1/images.
type serverImage struct {
	Names     []string       `json:"names"`
	Digest    string         `json:"digest"`
	SizeBytes int64          `json:"size_bytes,omitempty"`
	Default   bool           `json:"default,omitempty"`
	Warm      map[string]int `json:"warm,omitempty"`
}

// serverImagesCmd lists a running server's images with the tiers that
// keep warm sandboxes of each.
func serverImagesCmd(ctx context.Context, e *env, base, keyFile string, jsonMode bool) int {
	if keyFile == "" {
		fmt.Fprintln(e.stderr, "airlock: images --server needs --key-file")
		return exitUsage
	}
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		fmt.Fprintf(e.stderr, "airlock: --server %q: want the server's base URL, such as http://127.0.0.1:8420\n", base)
		return exitUsage
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		fmt.Fprintf(e.stderr, "airlock: --key-file: %v\n", err)
		return exitUsage
	}
	list, err := fetchImages(ctx, strings.TrimRight(base, "/")+"/v1/images", strings.TrimSpace(string(key)))
	if err != nil {
		return e.fail(err)
	}
	if jsonMode {
		if err := writeJSON(e.stdout, list); err != nil {
			return e.fail(err)
		}
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMES\tDIGEST\tSIZE\tWARM")
	for _, in := range list {
		names := value.Line(strings.Join(in.Names, ","), 512)
		if in.Default {
			names += " (default)"
		}
		warm := "-"
		if len(in.Warm) > 0 {
			var parts []string
			for _, tier := range slices.Sorted(maps.Keys(in.Warm)) {
				parts = append(parts, fmt.Sprintf("%s:%d", value.Line(tier, 512), in.Warm[tier]))
			}
			warm = strings.Join(parts, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f MB\t%s\n", names, value.Line(in.Digest, 512), float64(in.SizeBytes)/1e6, warm)
	}
	if err := tw.Flush(); err != nil {
		return e.fail(err)
	}
	return exitOK
}

// fetchImages reads a server's image list.
func fetchImages(ctx context.Context, url, key string) ([]serverImage, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", url, value.Line(resp.Status, 512), value.Line(strings.TrimSpace(string(body)), 512))
	}
	list := []serverImage{}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return list, nil
}
