package account

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// An account's executor can also serve over HTTPS with mutual TLS, for
// callers on other machines. Its trust root is one CA per account, made
// by `airlock account add NAME --listen ADDR`:
//
//   - DIR/NAME.tls (root's, mode 0700): the CA's key and the caller's
//     bundle: ca.pem (the CA the caller pins), client.pem and
//     client-key.pem (the certificate the executor accepts);
//   - DIR/NAME/tls (the account's, mode 0700): ca.pem (to verify callers),
//     server.pem and server-key.pem (the executor's own key pair).
//
// The caller pins the account's CA alone (no system roots), and the
// executor accepts only client certificates that CA signed for client
// authentication.

// Remote is how a caller reaches the executor of an account on another
// machine: its URL and the PEM files of the pinned CA and of the caller's
// client certificate and key.
type Remote struct {
	URL  string `json:"url"`
	CA   string `json:"ca"`
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

// TLSDir is the account's own TLS directory (the executor's key pair).
func (r Record) TLSDir() string { return filepath.Join(r.Home(), "tls") }

// ClientDir is root's directory with the account's CA key and the bundle
// a caller needs: ca.pem, client.pem, client-key.pem.
func (r Record) ClientDir() string { return filepath.Join(r.dir, r.Name+".tls") }

// certLife is how long the certificates made for an account last.
const certLife = 2 * 365 * 24 * time.Hour

// MakeTLS makes the account's CA, the executor's server certificate for
// names (DNS names or IP addresses) and a client certificate for a
// caller, unless they exist (runs as root, from `airlock account add`).
func (r Record) MakeTLS(names []string) error {
	cdir := r.ClientDir()
	home, err := openOwn(r.Home())
	if err != nil {
		return err
	}
	defer home.Close()
	if _, err := home.Lstat(filepath.Join(tlsSub, "server.pem")); err == nil {
		return nil
	}
	// The caller's directory is an entry of root's DIR; the executor's
	// is inside the account's (see openOwn).
	if err := os.MkdirAll(cdir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(cdir, 0o700); err != nil {
		return err
	}
	if err := os.Lchown(cdir, 0, 0); err != nil {
		return err
	}
	if err := dirOwn(home, tlsSub, 0o700, r.UID, r.GID); err != nil {
		return err
	}
	croot, err := os.OpenRoot(cdir)
	if err != nil {
		return err
	}
	defer croot.Close()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Minute)
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "airlock account " + r.Name + " CA"},
		NotBefore:             now,
		NotAfter:              now.Add(certLife),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, ca, err := sign(caTmpl, &caKey.PublicKey, nil, caKey)
	if err != nil {
		return err
	}
	caPEM := pemOf("CERTIFICATE", caDER)
	files := []pemFile{
		{croot, "ca.pem", caPEM, 0o644, 0, 0},
		{croot, "ca-key.pem", nil, 0o600, 0, 0},
		{home, filepath.Join(tlsSub, "ca.pem"), caPEM, 0o644, r.UID, r.GID},
	}
	if files[1].data, err = keyPEM(caKey); err != nil {
		return err
	}
	if err := writeFiles(files); err != nil {
		return err
	}
	return r.issueLeaves(croot, home, ca, caKey, names, now)
}

// tlsSub is the executor's TLS directory inside the account's.
const tlsSub = "tls"

// issueLeaves makes the executor's certificate for names and the
// caller's client certificate, new keys for both, signed by the CA.
// croot is the caller's directory, home the account's.
func (r Record) issueLeaves(croot, home *os.Root, ca *x509.Certificate, caKey *ecdsa.PrivateKey, names []string, now time.Time) error {
	notAfter := now.Add(certLife)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "airlock account " + r.Name + " executor"},
		NotBefore:   now,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			server.IPAddresses = append(server.IPAddresses, ip)
		} else {
			server.DNSNames = append(server.DNSNames, n)
		}
	}
	client := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "caller"},
		NotBefore:   now,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	var files []pemFile
	for _, leaf := range []struct {
		tmpl      *x509.Certificate
		root      *os.Root
		cert, key string
		uid, gid  int
	}{
		{client, croot, "client.pem", "client-key.pem", 0, 0},
		{server, home, filepath.Join(tlsSub, "server.pem"), filepath.Join(tlsSub, "server-key.pem"), r.UID, r.GID},
	} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		der, _, err := sign(leaf.tmpl, &key.PublicKey, ca, caKey)
		if err != nil {
			return err
		}
		kp, err := keyPEM(key)
		if err != nil {
			return err
		}
		// Keys first: a certificate never names a key not yet written.
		files = append(files, pemFile{leaf.root, leaf.key, kp, 0o600, leaf.uid, leaf.gid},
			pemFile{leaf.root, leaf.cert, pemOf("CERTIFICATE", der), 0o644, leaf.uid, leaf.gid})
	}
	return writeFiles(files)
}

// RenewBefore is how close to its expiry RenewTLS renews a certificate.
const RenewBefore = 30 * 24 * time.Hour

// RenewTLS gives the executor and the caller new certificates, with new
// keys, from the account's CA, for the names the executor's certificate
// holds; it runs as root where the executor runs. Unless force, it does
// so only when either certificate expires within RenewBefore, and reports
// whether it did. The CA stays, so callers keep their pinned ca.pem; they
// need the new client.pem and client-key.pem, and the executor reads its
// own at start. A CA that expires within RenewBefore is not renewed here:
// remove and add the account.
func (r Record) RenewTLS(now time.Time, force bool) (bool, error) {
	croot, err := os.OpenRoot(r.ClientDir())
	if err != nil {
		return false, fmt.Errorf("account %s has no certificates to renew (made by account add --listen): %w", r.Name, err)
	}
	defer croot.Close()
	ca, err := readCert(croot, "ca.pem")
	if err != nil {
		return false, fmt.Errorf("account %s has no certificates to renew (made by account add --listen): %w", r.Name, err)
	}
	keyData, err := readPrivate(filepath.Join(r.ClientDir(), "ca-key.pem"))
	if err != nil {
		return false, err
	}
	caKey, err := parseECKey(keyData)
	if err != nil {
		return false, fmt.Errorf("account %s: its CA key: %w", r.Name, err)
	}
	if ca.NotAfter.Before(now.Add(RenewBefore)) {
		return false, fmt.Errorf("account %s: its CA expires %s; renew it by removing and adding the account", r.Name, ca.NotAfter.UTC().Format(time.RFC3339))
	}
	home, err := openOwn(r.Home())
	if err != nil {
		return false, err
	}
	defer home.Close()
	server, err := readCert(home, filepath.Join(tlsSub, "server.pem"))
	if err != nil {
		return false, err
	}
	client, err := readCert(croot, "client.pem")
	if err != nil {
		return false, err
	}
	if !force && server.NotAfter.After(now.Add(RenewBefore)) && client.NotAfter.After(now.Add(RenewBefore)) {
		return false, nil
	}
	names := slices.Clone(server.DNSNames)
	for _, ip := range server.IPAddresses {
		names = append(names, ip.String())
	}
	// The executor's directory is the account's: made again should its
	// user have put something else there.
	if err := dirOwn(home, tlsSub, 0o700, r.UID, r.GID); err != nil {
		return false, err
	}
	return true, r.issueLeaves(croot, home, ca, caKey, names, now.Add(-time.Minute))
}

// readCert reads the PEM certificate name inside root, not through a
// link.
func readCert(root *os.Root, name string) (*x509.Certificate, error) {
	data, err := readOwn(root, name, -1)
	if err != nil {
		return nil, err
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s/%s: no PEM certificate", root.Name(), name)
	}
	return x509.ParseCertificate(b.Bytes)
}

func parseECKey(data []byte) (*ecdsa.PrivateKey, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, errors.New("no PEM key")
	}
	if k, err := x509.ParseECPrivateKey(b.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("not an ECDSA key")
	}
	return ek, nil
}

func writeFiles(files []pemFile) error {
	for _, f := range files {
		// Written aside and renamed: a reader sees the old file or the
		// new one, never half of one.
		if err := writeOwn(f.root, f.name, f.data, f.mode, f.uid, f.gid); err != nil {
			return err
		}
	}
	return nil
}

type pemFile struct {
	root     *os.Root
	name     string
	data     []byte
	mode     os.FileMode
	uid, gid int
}

func sign(tmpl *x509.Certificate, pub any, parent *x509.Certificate, key *ecdsa.PrivateKey) ([]byte, *x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	if err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(der)
	return der, c, err
}

func pemOf(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func keyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pemOf("PRIVATE KEY", der), nil
}

// readPrivate reads a key file, refusing a link or a file others may read.
func readPrivate(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %04o: refused (chmod 600 %s)", path, st.Mode().Perm(), path)
	}
	buf := make([]byte, 64<<10)
	n, err := f.Read(buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// keyPair loads a certificate and its key (the key file 0600 or
// stricter).
func keyPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	kp, err := readPrivate(keyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	c, err := tls.X509KeyPair(certPEM, kp)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s, %s: %w", certFile, keyFile, err)
	}
	return c, nil
}

// caPool is a pool holding only the certificates in file.
func caPool(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s: no PEM certificate", file)
	}
	return pool, nil
}

// ServerTLS is the executor's TLS configuration: its own key pair, and
// client certificates required and verified against the account's CA.
func (r Record) ServerTLS() (*tls.Config, error) {
	dir := r.TLSDir()
	cert, err := keyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"))
	if err != nil {
		return nil, fmt.Errorf("account %s: the executor's TLS key pair: %w", r.Name, err)
	}
	pool, err := caPool(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return nil, fmt.Errorf("account %s: %w", r.Name, err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS13,
	}, nil
}

// clientTLS is a caller's TLS configuration for rm: the pinned CA as the
// only root, and the client certificate.
func clientTLS(rm Remote) (*tls.Config, error) {
	pool, err := caPool(rm.CA)
	if err != nil {
		return nil, fmt.Errorf("the pinned CA: %w", err)
	}
	cert, err := keyPair(rm.Cert, rm.Key)
	if err != nil {
		return nil, fmt.Errorf("the client certificate: %w", err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}, nil
}

// tlsRefusal names a failed handshake in the caller's terms, or returns
// nil for an error that is not one.
func tlsRefusal(account, url, ca string, err error) error {
	var unknown x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var op *net.OpError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &unknown):
		return fmt.Errorf("the executor of account %s at %s presented a certificate the pinned CA (%s) did not sign: refused", account, url, ca)
	case errors.As(err, &hostErr):
		return fmt.Errorf("the executor of account %s at %s presented a certificate for another name (%v): refused", account, url, hostErr.Error())
	case errors.As(err, &invalid):
		return fmt.Errorf("the executor of account %s at %s presented an invalid certificate (%v): refused", account, url, invalid.Error())
	case errors.As(err, &op) && op.Op == "remote error":
		// A TLS alert from the executor: under TLS 1.3 the server checks
		// the client's certificate after the client's side of the
		// handshake is done, so its refusal arrives with the answer.
		return fmt.Errorf("the executor of account %s at %s refused this caller's client certificate (%v)", account, url, op.Err)
	}
	return nil
}
