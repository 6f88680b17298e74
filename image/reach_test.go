//go:build linux

package image

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// TestPullReach pulls from registries that redirect where a pull must not
// go, in a network namespace the test makes (a child process), whose
// loopback also carries a link-local address (the cloud metadata
// service's), a private one and two public ones, and whose /etc/hosts
// names a host that resolves to loopback: each redirect is refused before
// anything is sent there, and credentials never reach another host.
func TestPullReach(t *testing.T) {
	if testenv.Inside(t) {
		reachChild(t)
		return
	}
	if _, err := exec.LookPath("ip"); err != nil {
		testenv.Skipf(t, "ip (iproute2) not installed: %v", err)
	}
	testenv.InNamespaces(t, syscall.CLONE_NEWNET|syscall.CLONE_NEWNS, 2*time.Minute)
}

const (
	reachPublic  = "198.51.100.7" // the registry, when it is public
	reachCDN     = "198.51.100.8" // a public host it may send blobs to
	reachMeta    = "169.254.169.254"
	reachPrivate = "10.9.9.9"
)

// canary is a server that counts what reaches it, and serves the
// registry's blobs (so that, were a redirect followed, the pull would
// work).
type canary struct {
	mu   sync.Mutex
	hits []string // method, path and Authorization of each request
}

func (c *canary) handler(reg http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		r.ParseForm()
		c.hits = append(c.hits, r.Method+" "+r.URL.Path+" auth="+r.Header.Get("Authorization")+" form="+r.PostForm.Encode())
		c.mu.Unlock()
		reg.ServeHTTP(w, r)
	})
}

func (c *canary) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.hits
	c.hits = nil
	return h
}

func reachChild(t *testing.T) {
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", reachPublic + "/32", "dev", "lo"},
		{"addr", "add", reachCDN + "/32", "dev", "lo"},
		{"addr", "add", reachMeta + "/32", "dev", "lo"},
		{"addr", "add", reachPrivate + "/32", "dev", "lo"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// A name that resolves to loopback, in this mount namespace only.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost rebind.test\n"+reachCDN+" cdn.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(hosts, "/etc/hosts", "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount("/etc/hosts", 0)

	cert, pool := reachCert(t)
	pullRoots = pool
	defer func() { pullRoots = nil }()
	serve := func(addr string, secure bool, h http.Handler) string {
		t.Helper()
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		scheme := "http"
		if secure {
			l = tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}})
			scheme = "https"
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
		return scheme + "://" + l.Addr().String()
	}

	// The registry's content, pushed by a back door.
	reg := registry.New(registry.Logger(nilLogger()))
	back := serve("127.0.0.1:0", false, reg)
	img := goodImage(t, "reach")
	backRef, err := name.ParseReference(strings.TrimPrefix(back, "http://") + "/team/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(backRef, img); err != nil {
		t.Fatal(err)
	}
	digest := digestOf(t, img)

	// A front that asks for Basic auth and redirects blobs to *to.
	front := func(to *string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != "robot" || p != "robot-password-1" {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			if _, blob := repoOf(r.URL.Path); blob && *to != "" {
				http.Redirect(w, r, *to+r.URL.Path+"?sig=1", http.StatusTemporaryRedirect)
				return
			}
			reg.ServeHTTP(w, r)
		})
	}
	cn := &canary{}
	targets := map[string]string{
		"loopback over https":        serve("127.0.0.1:0", true, cn.handler(reg)),
		"loopback over http":         serve("127.0.0.1:0", false, cn.handler(reg)),
		"metadata service":           serve(reachMeta+":443", true, cn.handler(reg)),
		"metadata service over http": serve(reachMeta+":80", false, cn.handler(reg)),
		"private":                    serve(reachPrivate+":443", true, cn.handler(reg)),
		"public over http":           serve(reachCDN+":80", false, cn.handler(reg)),
		"unspecified":                "https://0.0.0.0:443",
		"IPv4-mapped loopback":       "",
	}
	lo := targets["loopback over https"]
	_, loPort, _ := net.SplitHostPort(strings.TrimPrefix(lo, "https://"))
	targets["a name resolving to loopback"] = "https://rebind.test:" + loPort
	targets["IPv4-mapped loopback"] = "https://[::ffff:127.0.0.1]:" + loPort
	targets["unspecified"] = "https://0.0.0.0:" + loPort
	cdn := &canary{}
	cdnURL := serve(reachCDN+":443", true, cdn.handler(reg))

	auth := func(host string) string {
		return writeAuthFile(t, map[string]map[string]string{host: {"username": "robot", "password": "robot-password-1"}})
	}

	// A public registry (over https).
	var to string
	pub := serve(reachPublic+":443", true, front(&to))
	pubHost := strings.TrimPrefix(pub, "https://")
	pubRef := pubHost + "/team/app@" + digest
	pubAuth := auth(pubHost)

	to = cdnURL
	if _, err := pullWith(t, Options{AuthFile: pubAuth}, pubRef); err != nil {
		t.Fatalf("public registry sending its blobs to a public CDN: %v", err)
	}
	hits := cdn.take()
	if len(hits) == 0 {
		t.Error("no blob was fetched from the CDN")
	}
	for _, h := range hits {
		if !strings.HasSuffix(h, "auth= form=") {
			t.Errorf("the CDN was sent credentials: %s", h)
		}
	}
	// The same by name.
	to = "https://cdn.test"
	if _, err := pullWith(t, Options{AuthFile: pubAuth}, pubRef); err != nil {
		t.Fatalf("public registry sending its blobs to a public CDN by name: %v", err)
	}
	cdn.take()

	for what, u := range targets {
		to = u
		_, err := pullWith(t, Options{AuthFile: pubAuth}, pubRef)
		if err == nil {
			t.Errorf("public registry redirecting to %s (%s): pulled", what, u)
		} else {
			imageError(t, err, true, "refused to follow the registry")
			t.Logf("%s: %v", what, err)
			if strings.Contains(err.Error(), "robot-password-1") {
				t.Errorf("%s: the error carries the password: %v", what, err)
			}
		}
		if hits := cn.take(); len(hits) != 0 {
			t.Errorf("public registry redirecting to %s (%s): reached it: %q", what, u, hits)
		}
	}

	// A registry on loopback may send blobs elsewhere on loopback, not to
	// the metadata service or a private address.
	loFront := serve("127.0.0.1:0", false, front(&to))
	loHost := strings.TrimPrefix(loFront, "http://")
	loRef := loHost + "/team/app@" + digest
	loAuth := auth(loHost)
	to = targets["loopback over http"]
	if _, err := pullWith(t, Options{AuthFile: loAuth}, loRef); err != nil {
		t.Fatalf("loopback registry sending its blobs to loopback: %v", err)
	}
	cn.take()
	for _, what := range []string{"metadata service over http", "private"} {
		to = targets[what]
		_, err := pullWith(t, Options{AuthFile: loAuth}, loRef)
		if err == nil {
			t.Errorf("loopback registry redirecting to %s: pulled", what)
		} else {
			imageError(t, err, true, "refused to follow the registry")
		}
		if hits := cn.take(); len(hits) != 0 {
			t.Errorf("loopback registry redirecting to %s: reached it: %q", what, hits)
		}
	}

	// A private registry may use another private address.
	privFront := serve(reachPrivate+":5000", false, front(&to))
	privHost := strings.TrimPrefix(privFront, "http://")
	privRef := privHost + "/team/app@" + digest
	to = targets["private"]
	if _, err := pullWith(t, Options{AuthFile: auth(privHost)}, privRef); err != nil {
		t.Fatalf("private registry sending its blobs to a private address: %v", err)
	}
	cn.take()
	to = targets["loopback over http"]
	if _, err := pullWith(t, Options{AuthFile: auth(privHost)}, privRef); err == nil {
		t.Error("private registry redirecting to loopback: pulled")
	}
	if hits := cn.take(); len(hits) != 0 {
		t.Errorf("private registry redirecting to loopback: reached it: %q", hits)
	}

	// A registry that redirects everything (its ping first) to the
	// metadata service, by address and by a name that resolves to
	// loopback.
	for what, u := range map[string]string{"metadata service": targets["metadata service"], "a name resolving to loopback": targets["a name resolving to loopback"]} {
		away := serve(reachPublic+":0", true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, u+r.URL.Path, http.StatusFound)
		}))
		_, err := pullWith(t, Options{}, strings.TrimPrefix(away, "https://")+"/team/app@"+digest)
		if err == nil {
			t.Errorf("registry redirected to %s: pulled", what)
		} else {
			imageError(t, err, true, "refused to follow the registry")
			t.Logf("registry redirected to %s: %v", what, err)
		}
		if hits := cn.take(); len(hits) != 0 {
			t.Errorf("registry redirected to %s: reached it: %q", what, hits)
		}
	}

	// A registry whose own address (its ping) is redirected to another
	// host, which challenges with a token service of its own: the
	// registry's user and password, or refresh token, must not go there.
	evil := &canary{}
	evilMux := http.NewServeMux()
	var evilURL string
	evilMux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"token":"evil-token-0123456789"}`)
	})
	evilMux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="`+evilURL+`/token",service="evil"`)
		w.WriteHeader(http.StatusUnauthorized)
	})
	evilURL = serve(reachCDN+":8443", true, evil.handler(evilMux))
	moved := serve(reachPublic+":8443", true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, evilURL+r.URL.Path, http.StatusFound)
	}))
	movedHost := strings.TrimPrefix(moved, "https://")
	for what, entry := range map[string]map[string]string{
		"user and password": {"username": "robot", "password": "robot-password-1"},
		"refresh token":     {"identitytoken": "refresh-token-0123456789"},
		"registry token":    {"registrytoken": "registry-token-0123456789"},
	} {
		a := writeAuthFile(t, map[string]map[string]string{movedHost: entry})
		if _, err := pullWith(t, Options{AuthFile: a}, movedHost+"/team/app@"+digest); err == nil {
			t.Errorf("%s: pulled from a registry that redirects everything", what)
		}
		hits := evil.take()
		if len(hits) == 0 {
			t.Errorf("%s: the redirect was not followed", what)
		}
		for _, h := range hits {
			for _, secret := range []string{"robot-password-1", strings.TrimPrefix(basicHeader("robot", "robot-password-1"), "Basic "),
				"refresh-token-0123456789", "registry-token-0123456789", "auth=Basic"} {
				if strings.Contains(h, secret) {
					t.Errorf("%s: the host the registry redirected to was sent a credential: %s", what, h)
				}
			}
		}
	}
}

// reachCert is a certificate for every address and name of the test,
// and the pool that trusts it.
func reachCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "airlock reach test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:              []string{"rebind.test", "cdn.test", "localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(reachPublic), net.ParseIP(reachCDN),
			net.ParseIP(reachMeta), net.ParseIP(reachPrivate), net.ParseIP("0.0.0.0"), net.ParseIP("::ffff:127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: c}, pool
}
