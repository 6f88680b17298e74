//go:build linux

package image

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// tokenRegistry is go-containerregistry's in-process registry on loopback
// behind the distribution protocol's token authentication, as Docker Hub,
// ghcr.io or a self-hosted registry with a token service run it: a /v2/
// request without a valid token is answered 401 with
// `WWW-Authenticate: Bearer realm=…/token,service=…,scope=…`; the token
// service at /token checks the service, the caller (anonymous, user and
// password by basic auth, or an OAuth2 refresh token posted as a form) and
// the scopes asked for, and issues a fresh token that opens only the
// repositories it granted. Public repositories are granted to anyone,
// anonymous callers included. With basic set the registry instead
// challenges `Basic` and checks the user and password itself.
//
// With echo set, it is careless: the token service answers a refusal with
// 200 and a body naming what it was sent (no token in it), and a blob
// request fails with 400 and a body quoting its Authorization header — a
// pull must carry none of that into its error.
type tokenRegistry struct {
	srv  *httptest.Server
	host string
	// backHost serves the same registry without authentication, for the
	// test to push its images.
	backHost string
	basic    bool
	echo     bool
	// redirect, when set, is where blob requests are sent on (307), as a
	// registry that keeps its blobs on a CDN does.
	redirect string
	reg      http.Handler

	users   map[string]string   // user → password
	refresh map[string]string   // refresh token → user
	access  map[string][]string // user → repositories it may pull
	public  []string            // repositories anyone may pull

	mu     sync.Mutex
	issued map[string][]string // token → repositories it opens
	seen   []string            // Authorization headers, as received
	asked  []string            // scopes asked of the token service
}

const testService = "airlock-test"

func newTokenRegistry(t *testing.T, basic, echo bool) *tokenRegistry {
	tr := &tokenRegistry{
		basic: basic, echo: echo,
		users:   map[string]string{"robot": "robot-password-1"},
		refresh: map[string]string{"refresh-token-0123456789": "robot"},
		access:  map[string][]string{"robot": {"team/private"}},
		public:  []string{"library/public"},
		issued:  map[string][]string{},
	}
	reg := registry.New(registry.Logger(nilLogger()))
	// Images are pushed straight to the registry, not through the front.
	back := httptest.NewServer(reg)
	t.Cleanup(back.Close)
	tr.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := r.Header.Get("Authorization"); h != "" {
			tr.mu.Lock()
			tr.seen = append(tr.seen, h)
			tr.mu.Unlock()
		}
		if r.URL.Path == "/token" {
			tr.token(w, r)
			return
		}
		repo, blob := repoOf(r.URL.Path)
		if !tr.allowed(r, repo) {
			tr.challenge(w, repo)
			return
		}
		if blob && tr.redirect != "" {
			http.Redirect(w, r, tr.redirect+r.URL.Path, http.StatusTemporaryRedirect)
			return
		}
		if blob && tr.echo {
			http.Error(w, "malformed request with Authorization: "+r.Header.Get("Authorization"), http.StatusBadRequest)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(tr.srv.Close)
	tr.reg = reg
	tr.host = strings.TrimPrefix(tr.srv.URL, "http://")
	tr.backHost = strings.TrimPrefix(back.URL, "http://")
	return tr
}

// push puts img in repo at tag, by the unauthenticated back door.
func (tr *tokenRegistry) push(t *testing.T, repo string, img v1.Image) string {
	ref, err := name.ParseReference(tr.backHost + "/" + repo + ":v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	return tr.host + "/" + repo + "@" + digestOf(t, img)
}

// repoOf returns the repository a /v2/ path names ("" for the ping) and
// whether it is a blob.
func repoOf(p string) (string, bool) {
	rest := strings.TrimPrefix(p, "/v2/")
	for _, kind := range []string{"/manifests/", "/blobs/", "/tags/"} {
		if i := strings.Index(rest, kind); i >= 0 {
			return rest[:i], kind == "/blobs/"
		}
	}
	return "", false
}

func (tr *tokenRegistry) allowed(r *http.Request, repo string) bool {
	if tr.basic {
		u, p, ok := r.BasicAuth()
		return ok && tr.users[u] == p && (repo == "" || slices.Contains(tr.access[u], repo))
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	repos, ok := tr.issued[tok]
	return ok && (repo == "" || slices.Contains(repos, repo))
}

func (tr *tokenRegistry) challenge(w http.ResponseWriter, repo string) {
	if tr.basic {
		w.Header().Set("WWW-Authenticate", `Basic realm="`+testService+`"`)
	} else {
		c := `Bearer realm="` + tr.srv.URL + `/token",service="` + testService + `"`
		if repo != "" {
			c += `,scope="repository:` + repo + `:pull"`
		}
		w.Header().Set("WWW-Authenticate", c)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
}

// token is the token service: who is asking, what may it pull of what it
// asks for, and a fresh token for exactly that.
func (tr *tokenRegistry) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.Form.Get("service") != testService {
		http.Error(w, "unknown service", http.StatusBadRequest)
		return
	}
	user, sent, bad := "", "", false
	if u, p, ok := r.BasicAuth(); ok {
		user, sent, bad = u, p, tr.users[u] != p
	} else if r.Method == http.MethodPost && r.PostForm.Get("grant_type") == "refresh_token" {
		sent = r.PostForm.Get("refresh_token")
		user, bad = tr.refresh[sent], tr.refresh[sent] == ""
	}
	if bad {
		if tr.echo {
			json.NewEncoder(w).Encode(map[string]string{"error": "invalid credentials", "detail": "user " + user + " with " + sent})
			return
		}
		http.Error(w, `{"details":"incorrect username or password"}`, http.StatusUnauthorized)
		return
	}
	var grant []string
	for _, s := range strings.Fields(strings.Join(r.Form["scope"], " ")) {
		tr.mu.Lock()
		tr.asked = append(tr.asked, s)
		tr.mu.Unlock()
		parts := strings.Split(s, ":")
		if len(parts) != 3 || parts[0] != "repository" || !slices.Contains(strings.Split(parts[2], ","), "pull") {
			continue
		}
		if slices.Contains(tr.public, parts[1]) || (user != "" && slices.Contains(tr.access[user], parts[1])) {
			grant = append(grant, parts[1])
		}
	}
	b := make([]byte, 16)
	rand.Read(b)
	tok := "issued-" + hex.EncodeToString(b)
	tr.mu.Lock()
	tr.issued[tok] = grant
	tr.mu.Unlock()
	json.NewEncoder(w).Encode(map[string]any{"token": tok, "access_token": tok, "expires_in": 300})
}

// headers returns the Authorization headers and scopes received since the
// last call.
func (tr *tokenRegistry) headers() (seen, asked []string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	seen, asked = tr.seen, tr.asked
	tr.seen, tr.asked = nil, nil
	return seen, asked
}

// tokens returns every token the service issued.
func (tr *tokenRegistry) tokens() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []string
	for tok := range tr.issued {
		out = append(out, tok)
	}
	return out
}

func basicHeader(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func pullWith(t *testing.T, opts Options, ref string) (string, error) {
	t.Helper()
	f := newFixture(t, opts)
	d, err := f.s.Pull(context.Background(), ref)
	f.tmpEmpty()
	return d, err
}

// TestPullTokenFlow pulls through the distribution protocol's token
// authentication: a public repository with an anonymous token, a private
// one with a token the service issues for the file's user and password or
// refresh token, each token asked for the repository's pull scope alone;
// a repository the user may not pull refused in one line.
func TestPullTokenFlow(t *testing.T) {
	tr := newTokenRegistry(t, false, false)
	pub := tr.push(t, "library/public", goodImage(t, "public"))
	priv := tr.push(t, "team/private", goodImage(t, "private"))
	other := tr.push(t, "team/other", goodImage(t, "other"))
	tr.headers()

	// Anonymous: the token service is asked without credentials and
	// grants the public repository.
	if _, err := pullWith(t, Options{}, pub); err != nil {
		t.Fatalf("public image with an anonymous token: %v", err)
	}
	seen, asked := tr.headers()
	if !slices.Equal(asked, []string{"repository:library/public:pull"}) {
		t.Errorf("anonymous pull asked for scopes %q; want the repository's pull alone", asked)
	}
	for _, h := range seen {
		if !strings.HasPrefix(h, "Bearer issued-") {
			t.Errorf("anonymous pull sent %q; want only the token the service issued", h)
		}
	}
	if len(seen) == 0 {
		t.Error("anonymous pull sent no token: the registry was not asked through the token flow")
	}

	// Anonymous, a private repository: the service grants nothing.
	_, err := pullWith(t, Options{}, priv)
	imageError(t, err, true, "registry "+tr.host+" refused access (401 Unauthorized)")
	tr.headers()

	for what, entry := range map[string]map[string]string{
		"user and password": {"username": "robot", "password": "robot-password-1"},
		"refresh token":     {"identitytoken": "refresh-token-0123456789"},
	} {
		auth := writeAuthFile(t, map[string]map[string]string{tr.host: entry})
		if _, err := pullWith(t, Options{AuthFile: auth}, priv); err != nil {
			t.Errorf("%s: %v", what, err)
		}
		seen, asked := tr.headers()
		if !slices.Equal(asked, []string{"repository:team/private:pull"}) {
			t.Errorf("%s: asked for scopes %q; want repository:team/private:pull alone", what, asked)
		}
		if what == "user and password" && !slices.Contains(seen, basicHeader("robot", "robot-password-1")) {
			t.Errorf("%s: the token service was not sent the user and password (%q)", what, seen)
		}
		// The same file pulls public images too.
		if _, err := pullWith(t, Options{AuthFile: auth}, pub); err != nil {
			t.Errorf("%s, public image: %v", what, err)
		}
		// A repository the user may not pull: its token opens nothing.
		_, err := pullWith(t, Options{AuthFile: auth}, other)
		imageError(t, err, false, "registry "+tr.host+" refused the credentials for it in "+auth+" (401 Unauthorized)")
		tr.headers()
	}
}

// TestPullBasicAuth pulls from a registry that challenges Basic: the
// file's user and password are sent to it as such; a wrong password is the
// operator's fault in one line, none the job's.
func TestPullBasicAuth(t *testing.T) {
	tr := newTokenRegistry(t, true, false)
	priv := tr.push(t, "team/private", goodImage(t, "private"))
	tr.headers()

	_, err := pullWith(t, Options{}, priv)
	imageError(t, err, true, "registry "+tr.host+" refused access (401 Unauthorized)")
	if seen, _ := tr.headers(); len(seen) != 0 {
		t.Errorf("an anonymous pull sent %q", seen)
	}

	wrong := writeAuthFile(t, map[string]map[string]string{tr.host: {"username": "robot", "password": "not-the-password"}})
	_, err = pullWith(t, Options{AuthFile: wrong}, priv)
	imageError(t, err, false, "registry "+tr.host+" refused the credentials for it in "+wrong+" (401 Unauthorized)")
	tr.headers()

	good := writeAuthFile(t, map[string]map[string]string{tr.host: {"auth": base64.StdEncoding.EncodeToString([]byte("robot:robot-password-1"))}})
	if _, err := pullWith(t, Options{AuthFile: good}, priv); err != nil {
		t.Fatal(err)
	}
	seen, _ := tr.headers()
	if len(seen) == 0 {
		t.Fatal("no Authorization header sent")
	}
	for _, h := range seen {
		if h != basicHeader("robot", "robot-password-1") {
			t.Errorf("sent %q; want the file's user and password by Basic", h)
		}
	}
}

// TestPullErrorsKeepNoCredential: a registry or token service that echoes
// what it was sent — a password, a refresh token, an Authorization header
// holding a token or a user and password — gets none of it into the
// pull's error, which becomes a job's Result and an audit record, and the
// error stays one line.
func TestPullErrorsKeepNoCredential(t *testing.T) {
	bearer := newTokenRegistry(t, false, true)
	bpriv := bearer.push(t, "team/private", goodImage(t, "private"))
	basic := newTokenRegistry(t, true, true)
	kpriv := basic.push(t, "team/private", goodImage(t, "private"))

	check := func(what string, err error, secrets ...string) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: pulled; want an error", what)
		}
		msg := err.Error()
		t.Logf("%s: %s", what, msg)
		for _, s := range secrets {
			if s != "" && strings.Contains(msg, s) {
				t.Errorf("%s: the error carries the credential %q: %s", what, s, msg)
			}
		}
		if strings.ContainsAny(msg, "\r\n") {
			t.Errorf("%s: the error is not one line: %q", what, msg)
		}
	}

	// The token service echoes a wrong password and a wrong refresh token
	// in a 200 without a token.
	for what, entry := range map[string]map[string]string{
		"password":       {"username": "robot", "password": "wrong-password-2"},
		"refresh token":  {"identitytoken": "wrong-refresh-token-3"},
		"short password": {"username": "robot", "password": "pw12"},
	} {
		auth := writeAuthFile(t, map[string]map[string]string{bearer.host: entry})
		_, err := pullWith(t, Options{AuthFile: auth}, bpriv)
		check("token service echoing a "+what, err, entry["password"], entry["identitytoken"],
			strings.TrimPrefix(basicHeader("robot", entry["password"]), "Basic "))
		// Too short to replace in the text: the whole answer is withheld.
		if what == "short password" && err != nil && !strings.Contains(err.Error(), "withheld: it quoted a credential") {
			t.Errorf("short password echoed: %v; want the answer withheld", err)
		}
	}

	// The registry echoes the Authorization header of a blob request: the
	// token the service issued for a refresh token and for a user and
	// password.
	for what, entry := range map[string]map[string]string{
		"issued token (refresh)":  {"identitytoken": "refresh-token-0123456789"},
		"issued token (password)": {"username": "robot", "password": "robot-password-1"},
	} {
		auth := writeAuthFile(t, map[string]map[string]string{bearer.host: entry})
		_, err := pullWith(t, Options{AuthFile: auth}, bpriv)
		check("registry echoing an "+what, err, append(bearer.tokens(), "robot-password-1", "refresh-token-0123456789")...)
		if err != nil && !strings.Contains(err.Error(), "400 Bad Request") {
			t.Errorf("%s: %v; want the registry's 400 named", what, err)
		}
	}

	// The Basic registry echoes the user and password it was sent.
	auth := writeAuthFile(t, map[string]map[string]string{basic.host: {"username": "robot", "password": "robot-password-1"}})
	_, err := pullWith(t, Options{AuthFile: auth}, kpriv)
	check("basic registry echoing", err, "robot-password-1", strings.TrimPrefix(basicHeader("robot", "robot-password-1"), "Basic "))
}

// TestPullRedirectKeepsCredentials pulls from registries, by Basic and by
// the token flow, that redirect blob requests to another host: the pull
// follows, but neither the file's user and password nor a token issued
// for the registry reaches the other host.
func TestPullRedirectKeepsCredentials(t *testing.T) {
	for _, basic := range []bool{true, false} {
		tr := newTokenRegistry(t, basic, false)
		priv := tr.push(t, "team/private", goodImage(t, "private"))
		var mu sync.Mutex
		var sent []string
		cdn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			sent = append(sent, r.Header.Get("Authorization"))
			mu.Unlock()
			tr.reg.ServeHTTP(w, r)
		}))
		t.Cleanup(cdn.Close)
		tr.redirect = cdn.URL
		auth := writeAuthFile(t, map[string]map[string]string{tr.host: {"username": "robot", "password": "robot-password-1"}})
		if _, err := pullWith(t, Options{AuthFile: auth}, priv); err != nil {
			t.Fatalf("basic %v: %v", basic, err)
		}
		mu.Lock()
		if len(sent) == 0 {
			t.Errorf("basic %v: no blob was fetched from the other host", basic)
		}
		for _, h := range sent {
			if h != "" {
				t.Errorf("basic %v: the other host was sent %q", basic, h)
			}
		}
		mu.Unlock()
	}
}

// TestPullCancelledLeavesOthers: two pulls of one image share its unpack;
// the first giving up (its job cancelled) does not fail the second, which
// then does the work itself.
func TestPullCancelledLeavesOthers(t *testing.T) {
	ref, hit, release := gatedRegistry(t, goodImage(t, "shared"))
	f := newFixture(t, Options{})

	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	errs := make(chan error, 2)
	go func() { _, err := f.s.Pull(ctx1, ref); errs <- err }()
	<-hit // the first pull is unpacking
	second := make(chan error, 1)
	go func() { _, err := f.s.Pull(context.Background(), ref); second <- err }()
	for f.s.waiting.Load() == 0 {
		select {
		case err := <-second:
			t.Fatalf("the second pull ended before waiting on the first: %v", err)
		default:
		}
		time.Sleep(time.Millisecond)
	}
	cancel1()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled pull: %v, want context.Canceled", err)
	}
	release()
	if err := <-second; err != nil {
		t.Fatalf("the second pull failed with the first's cancellation: %v", err)
	}
	if n := f.s.unpacks.Load(); n != 1 {
		t.Errorf("%d unpacks, want 1", n)
	}
	f.tmpEmpty()
}

// TestPullErrorHasNoControl: a registry's answer quoted in a pull's error
// (which a terminal shows) reaches it without its escape sequences.
func TestPullErrorHasNoControl(t *testing.T) {
	reg := registry.New(registry.Logger(nilLogger()))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, blob := repoOf(r.URL.Path); blob && r.Method == http.MethodGet {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, "gone \x1b]0;owned\x07\x1b[2J\x9b31m\x00 away")
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img := goodImage(t, "control")
	pushRef, err := name.ParseReference(host + "/team/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(pushRef, img); err != nil {
		t.Fatal(err)
	}
	_, err = pullWith(t, Options{}, host+"/team/app@"+digestOf(t, img))
	if err == nil {
		t.Fatal("pulled")
	}
	if !strings.Contains(err.Error(), "gone") {
		t.Fatalf("%v: the registry's answer is not quoted, the test proves nothing", err)
	}
	if i := strings.IndexFunc(err.Error(), unicode.IsControl); i >= 0 {
		t.Errorf("the error holds a control character at %d: %q", i, err)
	}
}

// TestUnpacksBounded: what images being unpacked at once write is bounded
// in all (twice the size cap), so jobs naming many new images cannot fill
// the disk; one going beyond fails as the store's condition, without any
// slow one keeping it waiting, and a retry works once the others are done.
func TestUnpacksBounded(t *testing.T) {
	const capBytes = 8 << 20
	const fileSize = 6 << 20 // two fit in twice the cap, three do not
	reg := registry.New(registry.Logger(nilLogger()))
	var mu sync.Mutex
	layers := map[string]int{} // layer digest → image
	rel := []chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		i, isLayer := layers[path.Base(r.URL.Path)]
		mu.Unlock()
		if _, blob := repoOf(r.URL.Path); !blob || r.Method != http.MethodGet || !isLayer {
			reg.ServeHTTP(w, r)
			return
		}
		// The layer's first bytes (its file's header), then the rest once
		// the test releases it.
		rec := httptest.NewRecorder()
		reg.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.WriteHeader(rec.Code)
		w.Write(body[:256<<10])
		w.(http.Flusher).Flush()
		select {
		case <-rel[i]:
		case <-r.Context().Done():
			return
		}
		w.Write(body[256<<10:])
	}))
	defer srv.Close()
	var once [3]sync.Once
	release := func(i int) { once[i].Do(func() { close(rel[i]) }) }
	// Before the server closes, which waits for its requests: a failing
	// test leaves none held.
	defer func() {
		for i := range rel {
			release(i)
		}
	}()
	host := strings.TrimPrefix(srv.URL, "http://")
	var refs []string
	for i := range rel {
		body := make([]byte, fileSize)
		rand.Read(body)
		layer := layerOf(t, file("data", string(body)))
		d, err := layer.Digest()
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		layers[d.String()] = i
		mu.Unlock()
		img := imageOf(t, nil, layer)
		repo := fmt.Sprint("team/app", i)
		pushRef, err := name.ParseReference(host + "/" + repo + ":v1")
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(pushRef, img); err != nil {
			t.Fatal(err)
		}
		refs = append(refs, host+"/"+repo+"@"+digestOf(t, img))
	}
	f := newFixture(t, Options{MaxBytes: capBytes})
	errs := make(chan error, 2)
	for _, ref := range refs[:2] {
		go func() { _, err := f.s.Pull(context.Background(), ref); errs <- err }()
	}
	// Both write their file (each within the cap): the third would go
	// beyond twice the cap in all.
	for f.s.inflight.used.Load() < 2*fileSize {
		time.Sleep(time.Millisecond)
	}
	release(2)
	_, err := f.s.Pull(context.Background(), refs[2])
	imageError(t, err, false, "unpacked at once")
	release(0)
	release(1)
	for range 2 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if n := f.s.inflight.used.Load(); n != 0 {
		t.Errorf("%d bytes still taken of the shared budget", n)
	}
	if _, err := f.s.Pull(context.Background(), refs[2]); err != nil {
		t.Errorf("the third image, once the others are done: %v", err)
	}
	f.tmpEmpty()
}
