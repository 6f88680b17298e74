package main

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/testing/imagetest"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// The image commands and --image, end to end: an image imported from an
// OCI layout is listed and runs as the process tier's root; an unknown
// image is invalid input.
func TestImageCommands(t *testing.T) {
	root := imagetest.Busybox(t, "airlock-cli-test")
	src := imagetest.Layout(t, root, nil)
	store := filepath.Join(t.TempDir(), "images")

	out, errOut, code := run(t, "", "image", "--images", store, "import", "bb", src)
	require.Equal(t, exitOK, code, errOut)
	require.True(t, strings.HasPrefix(out, "bb sha256:"), out)
	digest := strings.Fields(out)[1]

	out, errOut, code = run(t, "", "images", "--images", store)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "bb")
	assert.Contains(t, out, digest)
	// --json speaks the API's JSON (lower-case names, as GET /v1/images
	// and every Result), lists as [] when empty.
	out, errOut, code = run(t, "", "images", "--images", store, "--json")
	require.Equal(t, exitOK, code, errOut)
	var listed []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &listed), out)
	require.Len(t, listed, 1, out)
	assert.Equal(t, []any{"bb"}, listed[0]["names"], out)
	assert.Equal(t, []any{}, listed[0]["refs"], out)
	assert.Equal(t, digest, listed[0]["digest"], out)
	assert.Positive(t, listed[0]["size_bytes"], out)
	for _, k := range []string{"last_use", "held"} {
		assert.Contains(t, listed[0], k, out)
	}

	_, errOut, code = run(t, "", "image", "--images", store, "import", "bb2", filepath.Join(src, "missing"))
	assert.Equal(t, exitUsage, code, errOut)
	assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
	_, errOut, code = run(t, "", "image", "--images", store, "frobnicate")
	assert.Equal(t, exitUsage, code, errOut)

	needProcess(t)
	job := `{"kind":"command","tier":"process","situation":"internal","image":"bb","grants":{"spawn":true},` +
		`"argv":["sh","-c","cat /etc/os-release; ls /usr/lib/x86_64-linux-gnu 2>&1 | head -1"]}`
	out, errOut, code = run(t, job, "run", "--images", store, "--json", "-")
	require.Equal(t, exitOK, code, errOut)
	var res airlock.Result
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	assert.Contains(t, res.Stdout, "airlock-cli-test", "the job ran in the image")
	assert.Contains(t, res.Stdout, "No such file", "the host's /usr is not there")
	assert.Equal(t, digest, res.Image, "the result names the digest")

	out, errOut, code = run(t, "", "run", "--images", store, "--image", "bb", "--tier", "process", "--", "cat", "/etc/os-release")
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "ID=airlock-cli-test\n", out, "--image")

	_, errOut, code = run(t, "", "run", "--images", store, "--image", "nope", "--tier", "process", "--", "true")
	assert.Equal(t, exitUsage, code, errOut)
	assert.Contains(t, errOut, "nope")

	// Without a store, the host view: a command job runs as before.
	_, errOut, code = run(t, "", "run", "--images", filepath.Join(t.TempDir(), "none"), "--tier", "process", "--", "true")
	assert.Equal(t, exitOK, code, errOut)
}

// The catalogue's minimal image, built from Debian packages, runs a bash
// job on the process tier (and gVisor where it runs): what the host view
// of a busybox guest could not.
func TestImageBuildMinimal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an image from Debian packages (a minute)")
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		testenv.Skipf(t, "mmdebstrap is not installed (make setup installs it)")
	}
	needProcess(t)
	store := filepath.Join(t.TempDir(), "images")
	out, errOut, code := run(t, "", "image", "--images", store, "build", "minimal")
	require.Equal(t, exitOK, code, errOut)
	require.True(t, strings.HasPrefix(out, "minimal sha256:"), out)
	again, errOut, code := run(t, "", "image", "--images", store, "build", "--missing", "minimal")
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, out, again, "--missing names the image it keeps")
	assert.Contains(t, errOut, "minimal: up to date")
	// Without a flag an image built from the current recipe is kept too;
	// --force builds it again.
	again, errOut, code = run(t, "", "image", "--images", store, "build", "minimal")
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, out, again, "build keeps an image built from the current recipe")
	assert.Equal(t, "minimal: up to date, built from the current recipe (--force rebuilds it)\n", errOut)
	again, errOut, code = run(t, "", "image", "--images", store, "build", "--force", "minimal")
	require.Equal(t, exitOK, code, errOut)
	assert.True(t, strings.HasPrefix(again, "minimal sha256:"), again)
	assert.Contains(t, errOut, "minimal: building from Debian packages")
	_, errOut, code = run(t, "", "image", "--images", store, "build", "nosuch")
	assert.Equal(t, exitUsage, code, errOut)

	tiers := []string{"process"}
	r, closeAll, err := (&routerFlags{}).open()
	require.NoError(t, err)
	if r.Unavailable("gvisor") == nil {
		tiers = append(tiers, "gvisor")
	}
	closeAll()
	for _, tier := range tiers {
		out, errOut, code := run(t, "", "run", "--images", store, "--image", "minimal", "--tier", tier, "--allow-spawn", "--",
			"bash", "-c", `echo "hi from $(cut -d. -f1 /etc/debian_version)"; [ -w / ] || echo read-only`)
		require.Equal(t, exitOK, code, "%s: %s", tier, errOut)
		assert.Equal(t, "hi from 12\nread-only\n", out, tier)
	}
}

// TestImageProgressLines: a first disk build shows as two lines, its start
// and what it cost; repeated events of one phase print once.
func TestImageProgressLines(t *testing.T) {
	var b strings.Builder
	p := imageProgress(&b)
	p(image.Event{Image: "python", Phase: "derive", Kind: "microvm-disk"})
	p(image.Event{Image: "python", Phase: "derive", Kind: "microvm-disk"})
	p(image.Event{Image: "python", Phase: "derived", Kind: "microvm-disk", Took: 12340 * time.Millisecond})
	want := "python: building its microvm-disk (once per image)\npython: built its microvm-disk in 12.3s\n"
	if b.String() != want {
		t.Errorf("progress %q, want %q", b.String(), want)
	}
}

// `airlock images --server` lists a server's images with each tier's warm
// sandboxes, sending the key from --key-file; a refused key is one line.
func TestImagesServerWarm(t *testing.T) {
	const key = "k-123"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/images" || r.Header.Get("Authorization") != "Bearer "+key {
			http.Error(w, `{"error":{"kind":"unauthorized"}}`, http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`[{"names":["python"],"digest":"sha256:aa","size_bytes":2000000,"default":true,"warm":{"process":2,"gvisor":1}},` +
			`{"names":["node"],"digest":"sha256:bb","size_bytes":1000000}]`))
	}))
	defer srv.Close()
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte(key+"\n"), 0o600))

	out, errOut, code := run(t, "", "images", "--server", srv.URL, "--key-file", keyFile)
	require.Equal(t, exitOK, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	assert.Equal(t, []string{"NAMES", "DIGEST", "SIZE", "WARM"}, strings.Fields(lines[0]))
	assert.Equal(t, "gvisor:1,process:2", strings.Fields(lines[1])[len(strings.Fields(lines[1]))-1], out)
	assert.Contains(t, lines[1], "python (default)")
	assert.Equal(t, "-", strings.Fields(lines[2])[len(strings.Fields(lines[2]))-1], out)

	require.NoError(t, os.WriteFile(keyFile, []byte("wrong"), 0o600))
	_, errOut, code = run(t, "", "images", "--server", srv.URL, "--key-file", keyFile)
	assert.NotEqual(t, exitOK, code)
	assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
	assert.Contains(t, errOut, "401")

	_, errOut, code = run(t, "", "images", "--server", srv.URL)
	assert.Equal(t, exitUsage, code, errOut)
}

// A server's names, digests, tiers and refusals reach the terminal
// without their control characters: an escape sequence would act on it.
func TestImagesServerTerminal(t *testing.T) {
	const esc = "\x1b]0;owned\x07\x1b[2J"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, "no\n"+esc+"\u202e", http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode([]map[string]any{{"names": []string{"py" + esc}, "digest": "sha256:" + esc, "warm": map[string]int{"gv" + esc: 1}}})
	}))
	defer srv.Close()
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte("k"), 0o600))
	printable := func(s string) bool {
		return !strings.ContainsFunc(s, func(r rune) bool { return r != '\n' && !unicode.IsPrint(r) })
	}
	out, errOut, code := run(t, "", "images", "--server", srv.URL, "--key-file", keyFile)
	require.Equal(t, exitOK, code, errOut)
	assert.True(t, printable(out), "%q", out)
	assert.Contains(t, out, `"py\x1b]0;owned\a\x1b[2J"`)

	require.NoError(t, os.WriteFile(keyFile, []byte("wrong"), 0o600))
	_, errOut, code = run(t, "", "images", "--server", srv.URL, "--key-file", keyFile)
	assert.NotEqual(t, exitOK, code)
	assert.True(t, printable(errOut), "%q", errOut)
	assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
}

// image pull --registry-auth: a registry that wants a bearer token (an
// in-process registry on loopback behind a check of it) is pulled from
// with the token of a docker config.json; without it the pull is invalid
// input, with a wrong one airlock's failure, each in one line naming the
// image.
func TestImagePullRegistryAuth(t *testing.T) {
	const token = "cli-token"
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			http.Error(w, "no token service", http.StatusUnauthorized)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+srv.URL+`/token",service="airlock-test"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED"}]}`, http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img, err := random.Image(512, 1)
	require.NoError(t, err)
	tag, err := name.ParseReference(host + "/team/tool:v1")
	require.NoError(t, err)
	require.NoError(t, remote.Write(tag, img, remote.WithAuth(&authn.Bearer{Token: token})))
	d, err := img.Digest()
	require.NoError(t, err)
	ref := host + "/team/tool@" + d.String()

	authFile := func(tok string) string {
		p := filepath.Join(t.TempDir(), "config.json")
		data, _ := json.Marshal(map[string]any{"auths": map[string]any{host: map[string]string{"registrytoken": tok}}})
		require.NoError(t, os.WriteFile(p, data, 0o600))
		return p
	}
	store := filepath.Join(t.TempDir(), "images")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, exitUsage, "refused access (401 Unauthorized)"},
		{[]string{"--registry-auth", authFile("wrong")}, exitInternal, "refused the credentials"},
	} {
		args := append(append([]string{"image", "--images", store}, c.args...), "pull", ref)
		_, errOut, code := run(t, "", args...)
		assert.Equal(t, c.code, code, errOut)
		assert.Contains(t, errOut, "image "+ref+": ")
		assert.Contains(t, errOut, c.want)
		// The progress line, then the error's one line.
		assert.Equal(t, ref+": pull\n", strings.SplitAfter(errOut, "\n")[0])
		assert.Equal(t, 1, strings.Count(errOut, "airlock: "), "one error line: %q", errOut)
		assert.Equal(t, 2, strings.Count(errOut, "\n"), "one error line: %q", errOut)
	}
	out, errOut, code := run(t, "", "image", "--images", store, "--registry-auth", authFile(token), "pull", ref)
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, ref+" "+d.String()+"\n", out)
}

// TestImagePoolFlag: `airlock serve --image-pool process:bb=1` keeps one
// sandbox of the image bb ready, which /metrics shows by bb's digest and
// name and a job naming bb claims; serve and mcp refuse, in one line, a
// pool of an image the store does not hold and a malformed value.
func TestImagePoolFlag(t *testing.T) {
	root := imagetest.Busybox(t, "airlock-pool-flag")
	store := filepath.Join(t.TempDir(), "images")
	out, errOut, code := run(t, "", "image", "--images", store, "import", "bb", imagetest.Layout(t, root, nil))
	require.Equal(t, exitOK, code, errOut)
	digest := strings.Fields(out)[1]
	_, cfg := writeConfig(t, "")
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("    situations: [internal]\n    situation: internal\n")
	require.NoError(t, err)
	f.Close()

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--config", cfg, "--listen", "127.0.0.1:0", "--images", store, "--image-pool", "process:nosuch=1"}, "pool process:nosuch: image nosuch: unknown image name"},
		{[]string{"mcp", "--images", store, "--image-pool", "gvisor:nosuch=2"}, "pool gvisor:nosuch: image nosuch: unknown image name"},
		{[]string{"mcp", "--images", store, "--image-pool", "process:bb"}, "want TIER:IMAGE=N"},
		{[]string{"serve", "--config", cfg, "--images", store, "--image-pool", "seccomp:bb=1"}, `tier "seccomp" keeps no pools per image`},
		{[]string{"serve", "--config", cfg, "--images", store, "--image-pool", "process:bb=65"}, `process pool of image "bb": 65`},
	} {
		_, errOut, code := run(t, "", bad.args...)
		if code != exitUsage || !strings.Contains(errOut, bad.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, %q; want %d and one line saying %q", bad.args, code, errOut, exitUsage, bad.want)
		}
	}

	c := startServeArgs(t, nil, "--config", cfg, "--listen", "127.0.0.1:0", "--images", store, "--image-pool", "process:bb=1")
	if !tierAvailable(t, c.addr, "process") {
		testenv.Skipf(t, "the process tier is unavailable")
	}
	get := func(path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+c.addr+path, nil)
		req.Header.Set("Authorization", "Bearer "+testKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		if st, _ := get("/readyz"); st == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			_, body := get("/readyz")
			t.Fatalf("not ready: %s (log %s)", body, c.log)
		}
		time.Sleep(200 * time.Millisecond)
	}
	_, metrics := get("/metrics")
	for _, want := range []string{
		`airlock_pool_image_size{tier="process",image="` + digest + `"} 1`,
		`airlock_pool_image_name{tier="process",image="` + digest + `",name="bb"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	st, body, err := post(t, c.addr, `{"kind":"command","argv":["cat","/etc/os-release"],"image":"bb","tier":"process","situation":"internal"}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, st, body)
	var res struct{ Image, Stdout, Tier string }
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	if res.Image != digest || !strings.Contains(res.Stdout, "airlock-pool-flag") {
		t.Errorf("job naming bb: %s; want image %s", body, digest)
	}
	_, metrics = get("/metrics")
	if want := `airlock_pool_image_claims_total{tier="process",image="` + digest + `",result="hit"} 1`; !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %s after the job", want)
	}

	// bb is rebuilt: imported again by another store handle, as `airlock
	// image build` or `import` does from another process. Without a
	// restart, the next job naming bb runs the new digest, the old
	// digest's pool drains, and the new one's fills and is claimed.
	out, errOut, code = run(t, "", "image", "--images", store, "import", "bb", imagetest.Layout(t, imagetest.Busybox(t, "airlock-pool-moved"), nil))
	require.Equal(t, exitOK, code, errOut)
	moved := strings.Fields(out)[1]
	require.NotEqual(t, digest, moved)
	job := `{"kind":"command","argv":["cat","/etc/os-release"],"image":"bb","tier":"process"}`
	st, body, err = post(t, c.addr, job)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, st, body)
	res.Image, res.Stdout = "", ""
	require.NoError(t, json.Unmarshal([]byte(body), &res))
	if res.Image != moved || !strings.Contains(res.Stdout, "airlock-pool-moved") {
		t.Errorf("job naming bb after the rebuild: %s; want image %s", body, moved)
	}
	newReady := `airlock_pool_image_size{tier="process",image="` + moved + `"} 1`
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, metrics = get("/metrics")
		if strings.Contains(metrics, newReady) && !strings.Contains(metrics, `image="`+digest+`"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool did not move to %s: /metrics %s", moved, metrics)
		}
	}
	if !strings.Contains(metrics, `airlock_pool_image_name{tier="process",image="`+moved+`",name="bb"} 1`) {
		t.Errorf("/metrics does not name bb's new pool: %s", metrics)
	}
	st, body, err = post(t, c.addr, job)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, st, body)
	_, metrics = get("/metrics")
	if want := `airlock_pool_image_claims_total{tier="process",image="` + moved + `",result="hit"} 1`; !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %s: the job after the pool moved did not claim from it", want)
	}
}

// airlock mcp without a configuration: the model names the image, so the
// host view is offered only while it is the default (no python built);
// once python is, a call naming host is refused.
func TestMCPLocalHostView(t *testing.T) {
	root := imagetest.Busybox(t, "airlock-mcp-host-test")
	src := imagetest.Layout(t, root, nil)
	store := filepath.Join(t.TempDir(), "images")
	_, errOut, code := run(t, "", "image", "--images", store, "import", "python", src)
	require.Equal(t, exitOK, code, errOut)
	s := localImages(store)
	assert.Equal(t, "python", s.Default)
	assert.False(t, s.AllowHost, "the host view beside a built python")
	s = localImages(filepath.Join(t.TempDir(), "none"))
	assert.Equal(t, "host", s.Default)
	assert.True(t, s.AllowHost, "the host view as the default")

	cs, stop := mcpStdio(t, "mcp", "--images", store)
	defer stop()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_command", Arguments: map[string]any{"argv": []string{"ls", "/usr/local/bin"}, "image": "host"}})
	require.NoError(t, err)
	text := res.Content[0].(*mcp.TextContent).Text
	assert.True(t, res.IsError, text)
	assert.Contains(t, text, "the host view is not enabled", text)
	assert.NotContains(t, text, "stdout", "the job ran: %s", text)
}

// TestImageStoreCannotBeMade: an image store that cannot be made (the
// default under a home that does not exist, say) is one line that says how
// to choose another.
func TestImageStoreCannotBeMade(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o600))
	t.Setenv(image.DirEnv, filepath.Join(blocker, "images"))
	for _, args := range [][]string{{"images"}, {"image", "rm", "x"}} {
		_, errOut, code := run(t, "", args...)
		assert.NotEqual(t, exitOK, code, args)
		assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
		assert.Contains(t, errOut, "choose another with --images DIR or $AIRLOCK_IMAGES", args)
	}
}

// TestSubcommandErrors: a missing, unknown or short subcommand of image
// or microvm is one line that names what is wanted, exit 2.
func TestSubcommandErrors(t *testing.T) {
	t.Setenv(image.DirEnv, t.TempDir())
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"image"}, "airlock: image takes a subcommand: build, import, pull or rm (see `airlock help image`)\n"},
		{[]string{"image", "bogus"}, "airlock: unknown subcommand \"bogus\": want build, import, pull or rm (see `airlock help image`)\n"},
		{[]string{"image", "import", "x"}, "airlock: image import takes NAME SRC (see `airlock help image`)\n"},
		{[]string{"image", "build"}, "airlock: image build takes one or more NAMEs (see `airlock help image`)\n"},
		{[]string{"image", "pull"}, "airlock: image pull takes REF (see `airlock help image`)\n"},
		{[]string{"image", "rm", "a", "b"}, "airlock: image rm takes NAME|DIGEST (see `airlock help image`)\n"},
	} {
		out, errOut, code := run(t, "", c.args...)
		assert.Equal(t, exitUsage, code, c.args)
		assert.Empty(t, out, c.args)
		assert.Equal(t, c.want, errOut, c.args)
	}
	if c := commands["microvm"]; c == nil || c.run == nil {
		return // the lean build's
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"microvm", "bogus"}, "airlock: unknown subcommand \"bogus\": want status or sweep (see `airlock help microvm`)\n"},
		{[]string{"microvm", "status", "x"}, "airlock: microvm takes at most one subcommand, status or sweep (see `airlock help microvm`)\n"},
	} {
		_, errOut, code := run(t, "", c.args...)
		assert.Equal(t, exitUsage, code, c.args)
		assert.Equal(t, c.want, errOut, c.args)
	}
}

// TestImagesServerBadURL: a --server without a scheme (the common slip)
// or an unreadable --key-file is a usage error naming the flag, before
// any request.
func TestImagesServerBadURL(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte("ak_x\n"), 0o600))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"images", "--server", "127.0.0.1:8420", "--key-file", keyFile}, "airlock: --server \"127.0.0.1:8420\": want the server's base URL, such as http://127.0.0.1:8420\n"},
		{[]string{"images", "--server", "localhost", "--key-file", keyFile}, "want the server's base URL"},
		{[]string{"images", "--server", "http://127.0.0.1:1", "--key-file", keyFile + ".none"}, "airlock: --key-file: open "},
	} {
		_, errOut, code := run(t, "", c.args...)
		assert.Equal(t, exitUsage, code, c.args)
		assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
		assert.Contains(t, errOut, c.want, c.args)
	}
}
