package account

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/interp/starlark"
	"github.com/airlock-sandbox/airlock/server"
)

// TestMutualTLS serves an executor over HTTPS on loopback with the
// certificates MakeTLS makes, and reaches it as a remote account: with
// the account's client certificate and pinned CA it runs; a client
// certificate of another CA, an unpinned server CA, or a certificate for
// another name are refused, and a refused caller never reaches the server.
func TestMutualTLS(t *testing.T) {
	if os.Geteuid() != 0 {
		// MakeTLS gives the caller's directory to root, as `airlock account add` does.
		testenv.Skipf(t, "making an account's certificates needs root")
	}
	dir := t.TempDir()
	r := Record{Name: "remote", UID: os.Getuid(), GID: os.Getgid()}
	if err := r.Save(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(r.Home(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := r.MakeTLS([]string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(r.ClientDir(), "ca-key.pem"), filepath.Join(r.ClientDir(), "client-key.pem"), filepath.Join(r.TLSDir(), "server-key.pem")} {
		if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", f, st.Mode(), err)
		}
	}
	cfg, err := r.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	inner, err := starlark.New(starlark.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	noRules := []approve.Rule{}
	srv, err := server.New(server.Config{Approvals: &server.Approvals{Rules: &noRules},
		Tenants: []server.Tenant{{Name: "caller", KeySHA256: server.HashKey("k"), Situation: airlock.SituationCredentials}}},
		[]airlock.Tier{NewExecutor(inner, filepath.Join(dir, StoreFile), nil)}, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var reached atomic.Int32
	h := srv.Handler()
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		reached.Add(1)
		req.Header.Set("Authorization", "Bearer k")
		h.ServeHTTP(w, req)
	}), ErrorLog: log.New(io.Discard, "", 0)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hs.Serve(tls.NewListener(ln, cfg))
	t.Cleanup(func() { srv.Shutdown(hs) })
	url := "https://" + ln.Addr().String()

	cd := r.ClientDir()
	good := Remote{URL: url, CA: filepath.Join(cd, "ca.pem"), Cert: filepath.Join(cd, "client.pem"), Key: filepath.Join(cd, "client-key.pem")}
	job := airlock.Job{Kind: airlock.KindStarlark, Code: "result = 6 * 7", Situation: airlock.SituationCredentials}
	res, err := New(NewRemoteConfig("remote", good)).Run(context.Background(), job)
	if err != nil || res.Value != int64(42) && res.Value != float64(42) {
		t.Fatalf("through mutual TLS: %v %+v", err, res)
	}
	if d := strings.Join(res.Decision, "\n"); !strings.Contains(d, "at "+url+" (mutual TLS") {
		t.Errorf("decision: %s", d)
	}
	n := reached.Load()

	rogueDir := t.TempDir()
	rogueCA, rogueKey := makeCA(t)
	rogueCAFile := filepath.Join(rogueDir, "ca.pem")
	os.WriteFile(rogueCAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rogueCA.Raw}), 0o644)
	rogueCert, rogueCertKey := makeClient(t, rogueCA, rogueKey, rogueDir)

	wrongCert, unpinned, otherName := good, good, good
	wrongCert.Cert, wrongCert.Key = rogueCert, rogueCertKey
	unpinned.CA = rogueCAFile
	otherName.URL = strings.Replace(url, "127.0.0.1", "localhost", 1)
	for name, c := range map[string]struct {
		rm   Remote
		want string
	}{
		"wrong client certificate": {wrongCert, "refused this caller's client certificate"},
		"unpinned server CA":       {unpinned, "presented a certificate the pinned CA (" + rogueCAFile + ") did not sign: refused"},
		"another name":             {otherName, "presented a certificate for another name"},
	} {
		_, err := New(NewRemoteConfig("remote", c.rm)).Run(context.Background(), job)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "account remote") {
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
	}
	if got := reached.Load(); got != n {
		t.Errorf("refused callers reached the server %d times", got-n)
	}

	// Configurations that cannot work are unavailable, saying why.
	loose := filepath.Join(rogueDir, "loose-key.pem")
	data, _ := os.ReadFile(good.Key)
	os.WriteFile(loose, data, 0o644)
	for name, c := range map[string]struct {
		mut  func(*Remote)
		want string
	}{
		"http":      {func(rm *Remote) { rm.URL = "http://127.0.0.1:1" }, "want https://HOST:PORT"},
		"path":      {func(rm *Remote) { rm.URL += "/v1" }, "want https://HOST:PORT"},
		"loose key": {func(rm *Remote) { rm.Key = loose }, "refused (chmod 600"},
		"no CA":     {func(rm *Remote) { rm.CA = filepath.Join(rogueDir, "none.pem") }, "the pinned CA"},
		"not a CA":  {func(rm *Remote) { rm.CA = good.Key }, "no PEM certificate"},
	} {
		rm := good
		c.mut(&rm)
		if err := New(NewRemoteConfig("remote", rm)).Available(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Available = %v, want %q", name, err, c.want)
		}
	}
}

func makeCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rogue CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func makeClient(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, dir string) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "caller"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	cert, kf := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(kf, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600)
	return cert, kf
}
