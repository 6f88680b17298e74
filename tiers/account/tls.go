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
	cdir, sdir := r.ClientDir(), r.TLSDir()
	if _, err := os.Stat(filepath.Join(sdir, "server.pem")); err == nil {
		return nil
	}
	for _, d := range []struct {
		path     string
		uid, gid int
	}{{cdir, 0, 0}, {sdir, r.UID, r.GID}} {
		if err := os.MkdirAll(d.path, 0o700); err != nil {
			return err
		}
		if err := os.Chmod(d.path, 0o700); err != nil {
			return err
		}
		if err := os.Lchown(d.path, d.uid, d.gid); err != nil {
			return err
		}
	}
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
	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "airlock account " + r.Name + " executor"},
		NotBefore:   now,
		NotAfter:    now.Add(certLife),
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
		NotAfter:    now.Add(certLife),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	caPEM := pemOf("CERTIFICATE", caDER)
	files := []pemFile{
		{filepath.Join(cdir, "ca.pem"), caPEM, 0o644, 0, 0},
		{filepath.Join(cdir, "ca-key.pem"), nil, 0o600, 0, 0},
		{filepath.Join(sdir, "ca.pem"), caPEM, 0o644, r.UID, r.GID},
	}
	if files[1].data, err = keyPEM(caKey); err != nil {
		return err
	}
	for _, leaf := range []struct {
		tmpl           *x509.Certificate
		cert, key      string
		uid, gid, mode int
	}{
		{client, filepath.Join(cdir, "client.pem"), filepath.Join(cdir, "client-key.pem"), 0, 0, 0},
		{server, filepath.Join(sdir, "server.pem"), filepath.Join(sdir, "server-key.pem"), r.UID, r.GID, 0},
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
		files = append(files, pemFile{leaf.cert, pemOf("CERTIFICATE", der), 0o644, leaf.uid, leaf.gid},
			pemFile{leaf.key, kp, 0o600, leaf.uid, leaf.gid})
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, f.data, f.mode); err != nil {
			return err
		}
		if err := os.Chmod(f.path, f.mode); err != nil {
			return err
		}
		if err := os.Lchown(f.path, f.uid, f.gid); err != nil {
			return err
		}
	}
	return nil
}

type pemFile struct {
	path     string
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
