package account

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// TestRenewTLS: renewal gives the executor and the caller new keys and
// certificates from the same CA, for the same names; it is a no-op while
// both are far from expiry (unless forced) and refuses when the CA itself
// is about to expire.
func TestRenewTLS(t *testing.T) {
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
	if err := r.MakeTLS([]string{"127.0.0.1", "exec.example"}); err != nil {
		t.Fatal(err)
	}
	read := func(p string) []byte { b, _ := os.ReadFile(p); return b }
	srvKey, cliKey := filepath.Join(r.TLSDir(), "server-key.pem"), filepath.Join(r.ClientDir(), "client-key.pem")
	caBefore, srvKeyBefore, cliKeyBefore := read(filepath.Join(r.ClientDir(), "ca.pem")), read(srvKey), read(cliKey)

	if did, err := r.RenewTLS(time.Now(), false); err != nil || did {
		t.Fatalf("renew of fresh certificates: %v %v", did, err)
	}
	if !bytes.Equal(read(srvKey), srvKeyBefore) {
		t.Fatal("a no-op renewal changed the server key")
	}
	if did, err := r.RenewTLS(time.Now(), true); err != nil || !did {
		t.Fatalf("forced renewal: %v %v", did, err)
	}
	if bytes.Equal(read(srvKey), srvKeyBefore) || bytes.Equal(read(cliKey), cliKeyBefore) {
		t.Error("renewal kept a key")
	}
	if !bytes.Equal(read(filepath.Join(r.ClientDir(), "ca.pem")), caBefore) {
		t.Error("renewal changed the CA")
	}
	for _, f := range []string{srvKey, cliKey} {
		if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", f, st.Mode(), err)
		}
	}
	home, err := os.OpenRoot(r.Home())
	if err != nil {
		t.Fatal(err)
	}
	defer home.Close()
	srv, err := readCert(home, "tls/server.pem")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(srv.DNSNames, []string{"exec.example"}) || len(srv.IPAddresses) != 1 || srv.IPAddresses[0].String() != "127.0.0.1" {
		t.Errorf("renewed names: %v %v", srv.DNSNames, srv.IPAddresses)
	}
	// The renewed pair still works together: the executor's TLS config
	// loads, and the caller's bundle verifies against the pinned CA.
	if _, err := r.ServerTLS(); err != nil {
		t.Fatal(err)
	}
	rm := Remote{URL: "https://127.0.0.1:1", CA: filepath.Join(r.ClientDir(), "ca.pem"), Cert: filepath.Join(r.ClientDir(), "client.pem"), Key: cliKey}
	if err := New(NewRemoteConfig("remote", rm)).Available(); err != nil {
		t.Fatal(err)
	}
	// Near the CA's own expiry, renewal refuses and says what to do.
	if _, err := r.RenewTLS(time.Now().Add(certLife-time.Hour), false); err == nil || !strings.Contains(err.Error(), "its CA expires") {
		t.Errorf("renewal near the CA's expiry: %v", err)
	}
	// An account without certificates has nothing to renew.
	if _, err := (Record{Name: "none", dir: dir}).RenewTLS(time.Now(), false); err == nil || !strings.Contains(err.Error(), "no certificates to renew") {
		t.Errorf("renewal without certificates: %v", err)
	}
}
