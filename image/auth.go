package image

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"unicode"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

// maxAuthFile bounds a credentials file: it holds a few tokens.
const maxAuthFile = 1 << 20

// authFile is the keychain of Options.AuthFile: the file is read at each
// pull, so a rotated token is used without a restart, and a registry it
// does not name is pulled from anonymously (no credential is ever sent to
// another registry than its own).
type authFile struct{ path string }

// authEntry is one registry's entry in a docker config.json's "auths".
type authEntry struct {
	Auth          string `json:"auth"`
	Username      string `json:"username"`
	Password      string `json:"password"`
	IdentityToken string `json:"identitytoken"`
	RegistryToken string `json:"registrytoken"`
}

// read returns the file's credentials by registry host.
func (a authFile) read() (map[string]authn.AuthConfig, error) {
	f, err := os.Open(a.path)
	if err != nil {
		return nil, fmt.Errorf("registry credentials: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("registry credentials: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("registry credentials %s: not a regular file", a.path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("registry credentials %s: mode %04o lets group or others read it; chmod 600 it", a.path, fi.Mode().Perm())
	}
	data, err := io.ReadAll(io.LimitReader(f, maxAuthFile+1))
	if err != nil {
		return nil, fmt.Errorf("registry credentials %s: %w", a.path, err)
	}
	if len(data) > maxAuthFile {
		return nil, fmt.Errorf("registry credentials %s: larger than %d bytes", a.path, maxAuthFile)
	}
	var cfg struct {
		Auths map[string]authEntry `json:"auths"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("registry credentials %s: not a docker config.json: %v", a.path, err)
	}
	out := make(map[string]authn.AuthConfig, len(cfg.Auths))
	for key, e := range cfg.Auths {
		ac := authn.AuthConfig{Username: e.Username, Password: e.Password, IdentityToken: e.IdentityToken, RegistryToken: e.RegistryToken}
		if e.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(e.Auth)
			user, pass, ok := strings.Cut(string(raw), ":")
			if err != nil || !ok {
				return nil, fmt.Errorf("registry credentials %s: auths[%q].auth is not base64 of user:password", a.path, key)
			}
			ac.Username, ac.Password = user, pass
		}
		if ac == (authn.AuthConfig{}) {
			return nil, fmt.Errorf("registry credentials %s: auths[%q] holds no credential (auth, username and password, identitytoken or registrytoken)", a.path, key)
		}
		out[registryHost(key)] = ac
	}
	return out, nil
}

// registryHost is the registry a config.json key names, as
// name.Registry.RegistryStr spells it: "https://index.docker.io/v1/" and
// "docker.io" are Docker Hub's "index.docker.io".
func registryHost(key string) string {
	k := strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
	k, _, _ = strings.Cut(k, "/")
	if k == "docker.io" || k == "registry-1.docker.io" {
		return name.DefaultRegistry
	}
	return k
}

// Resolve implements authn.Keychain.
func (a authFile) Resolve(r authn.Resource) (authn.Authenticator, error) {
	creds, err := a.read()
	if err != nil {
		return nil, err
	}
	if ac, ok := creds[r.RegistryStr()]; ok {
		return authn.FromConfig(ac), nil
	}
	return authn.Anonymous, nil
}

// has reports whether the file holds credentials for registry host.
func (a authFile) has(host string) bool {
	creds, err := a.read()
	_, ok := creds[host]
	return err == nil && ok
}

// minScrub is the shortest credential clean replaces where it appears; a
// shorter one found in an error withholds the whole message instead, since
// replacing every occurrence of a few characters would garble it.
const minScrub = 8

// maxTokenBody bounds the token service's answer credWatch reads for the
// tokens in it.
const maxTokenBody = 1 << 20

// credWatch is the transport of one pull. It remembers the credentials
// the pull sends (Authorization headers, basic auth decoded) and the
// tokens a token service hands back, so that clean strips them from the
// pull's error: a registry or token service that quotes what it was sent
// must not put the operator's credentials into a job's Result, the audit
// log or a terminal.
//
// With a policy, it also enforces where the pull may go (see pullPolicy).
type credWatch struct {
	inner  http.RoundTripper
	policy *pullPolicy
	mu     sync.Mutex
	vals   map[string]bool
}

func newCredWatch(inner http.RoundTripper, policy *pullPolicy) *credWatch {
	return &credWatch{inner: inner, policy: policy, vals: map[string]bool{}}
}

// add remembers credential values.
func (w *credWatch) add(vals ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range vals {
		if v = strings.TrimSpace(v); v != "" {
			w.vals[v] = true
		}
	}
}

// addConfig remembers what of an entry of the credentials file is secret
// (all but the user name), as it may be sent.
func (w *credWatch) addConfig(ac authn.AuthConfig) {
	vals := []string{ac.Password, ac.IdentityToken, ac.RegistryToken, ac.Auth}
	if ac.Password != "" {
		vals = append(vals, base64.StdEncoding.EncodeToString([]byte(ac.Username+":"+ac.Password)))
	}
	w.add(vals...)
	if w.policy != nil {
		w.policy.secret(vals...)
	}
}

func (w *credWatch) RoundTrip(r *http.Request) (*http.Response, error) {
	if w.policy != nil {
		var err error
		if r, err = w.policy.request(r); err != nil {
			return nil, err
		}
	}
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, v, _ := strings.Cut(h, " ")
		w.add(h, v)
		if strings.EqualFold(scheme, "basic") {
			if raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v)); err == nil {
				_, pass, _ := strings.Cut(string(raw), ":")
				w.add(string(raw), pass)
			}
		}
	}
	resp, err := w.inner.RoundTrip(r)
	if err == nil && w.policy != nil {
		w.policy.response(r, resp, nil)
	}
	if err == nil && resp.StatusCode == http.StatusOK && strings.Contains(r.URL.Path, "/manifests/") {
		// A manifest or index is read whole into memory: bounded as the
		// descriptors of the others are (go-containerregistry would take
		// 100 MiB).
		if resp.ContentLength > maxMeta {
			resp.Body.Close()
			return nil, fmt.Errorf("%w: manifest of %d bytes, over the %d bytes it may have", errTooLarge, resp.ContentLength, maxMeta)
		}
		resp.Body = readCloser{&capReader{r: resp.Body, n: maxMeta}, resp.Body}
	}
	if err != nil || resp.StatusCode != http.StatusOK || strings.HasPrefix(r.URL.Path, "/v2/") ||
		!strings.Contains(resp.Header.Get("Content-Type"), "json") {
		return resp, err
	}
	// A token service's answer (the realm is not under /v2/): its tokens
	// are credentials too. The body is read ahead and handed on whole.
	head, rerr := io.ReadAll(io.LimitReader(resp.Body, maxTokenBody))
	var tok struct {
		Token        string `json:"token"`
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
	}
	if json.Unmarshal(head, &tok) == nil {
		w.add(tok.Token, tok.AccessToken, tok.RefreshToken)
		if w.policy != nil {
			w.policy.response(r, resp, []string{tok.Token, tok.AccessToken, tok.RefreshToken})
		}
	}
	rest := io.Reader(resp.Body)
	if rerr != nil {
		rest = errReader{rerr}
	}
	resp.Body = readCloser{io.MultiReader(bytes.NewReader(head), rest), resp.Body}
	return resp, nil
}

// capReader fails once more than n bytes were read.
type capReader struct {
	r io.Reader
	n int64
}

func (c *capReader) Read(b []byte) (int, error) {
	if c.n < 0 {
		return 0, fmt.Errorf("%w: manifest over the %d bytes it may have", errTooLarge, maxMeta)
	}
	if int64(len(b)) > c.n+1 {
		b = b[:c.n+1]
	}
	k, err := c.r.Read(b)
	c.n -= int64(k)
	if c.n < 0 {
		return 0, fmt.Errorf("%w: manifest over the %d bytes it may have", errTooLarge, maxMeta)
	}
	return k, err
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

type readCloser struct {
	io.Reader
	io.Closer
}

// clean returns err with every credential the pull sent or received
// replaced, on one line (a registry's message may hold line breaks). The
// result still unwraps to err, so its kind (invalid, hostile, too large)
// is kept; an *Error inside is rewritten the same way.
func (w *credWatch) clean(err error) error {
	if err == nil {
		return nil
	}
	var ie *Error
	if errors.As(err, &ie) {
		return &Error{Ref: ie.Ref, Invalid: ie.Invalid, Err: w.clean(ie.Err)}
	}
	return &cleanError{msg: w.scrub(err.Error()), err: err}
}

func (w *credWatch) scrub(msg string) string {
	w.mu.Lock()
	vals := make([]string, 0, len(w.vals))
	for v := range w.vals {
		vals = append(vals, v)
	}
	w.mu.Unlock()
	// Longest first: a header holds its token, a basic token its password.
	sort.Slice(vals, func(i, j int) bool { return len(vals[i]) > len(vals[j]) })
	for _, v := range vals {
		if !strings.Contains(msg, v) {
			continue
		}
		if len(v) < minScrub {
			return "the registry's answer is withheld: it quoted a credential"
		}
		msg = strings.ReplaceAll(msg, v, "[credential]")
	}
	// One line, and no control character: a registry's answer quoted in
	// the error reaches a terminal, where an escape sequence would act.
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, strings.Join(strings.Fields(msg), " "))
}

// cleanError is an error whose message was cleaned of credentials.
type cleanError struct {
	msg string
	err error
}

func (e *cleanError) Error() string { return e.msg }
func (e *cleanError) Unwrap() error { return e.err }
