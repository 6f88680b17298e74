package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"sync"
	"time"
)

// ca is a per-gateway certificate authority, generated in memory, used to
// terminate the sandbox's TLS so each inner request can be checked. Its key
// never leaves the process; only the certificate is given to the sandbox.
type ca struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	pem     []byte
	notAft  time.Time
	mu      sync.Mutex
	leaves  map[string]*tls.Certificate
	maxLeaf int
}

func newCA(job string, ttl time.Duration) (*ca, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "airlock egress CA " + job, Organization: []string{"airlock"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(ttl),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("creating CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing CA certificate: %w", err)
	}
	return &ca{
		cert: cert, key: key, notAft: tmpl.NotAfter,
		pem:     pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		leaves:  map[string]*tls.Certificate{},
		maxLeaf: 256,
	}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

// leaf returns a certificate for host signed by the CA, cached per host.
func (c *ca) leaf(host string) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.leaves[host]; ok {
		return l, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     c.notAft,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, err
	}
	l := &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: key}
	if len(c.leaves) >= c.maxLeaf {
		clear(c.leaves)
	}
	c.leaves[host] = l
	return l, nil
}

// CA is a certificate authority held in memory, like the one each gateway
// terminates TLS with: it signs a leaf for any host name on demand. Tests
// and tools use it to serve TLS origins under names of their choosing.
type CA struct{ c *ca }

// NewCA generates a CA named name, valid for ttl.
func NewCA(name string, ttl time.Duration) (*CA, error) {
	c, err := newCA(name, ttl)
	if err != nil {
		return nil, err
	}
	return &CA{c}, nil
}

// Certificate is the CA's own certificate, for a client's roots.
func (a *CA) Certificate() *x509.Certificate { return a.c.cert }

// Leaf returns a certificate for host signed by the CA (cached per host),
// for a server's tls.Config.GetCertificate.
func (a *CA) Leaf(host string) (*tls.Certificate, error) { return a.c.leaf(host) }
