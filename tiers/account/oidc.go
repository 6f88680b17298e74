package account

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"
)

// Skew is how long past a job's deadline its OIDC token stays valid: the
// clocks of the executor and of the service that verifies may differ.
const Skew = 30 * time.Second

// Issuer mints the per-job OIDC tokens of an account (ES256 JWTs) and
// serves the keys that verify them: OIDC discovery at
// /.well-known/openid-configuration and the JWKS at /.well-known/jwks.json.
type Issuer struct {
	url string
	key *ecdsa.PrivateKey
	kid string
	now func() time.Time
}

// LoadIssuer reads the account's signing key from keyPath, making one
// (P-256, mode 0600) if there is none; url is the issuer's URL, the `iss`
// of every token and where verifiers look for discovery.
func LoadIssuer(url, keyPath string) (*Issuer, error) {
	key, err := readKey(keyPath)
	if errors.Is(err, os.ErrNotExist) {
		key, err = newKey(keyPath)
	}
	if err != nil {
		return nil, fmt.Errorf("OIDC signing key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(pub)
	return &Issuer{url: strings.TrimSuffix(url, "/"), key: key, kid: hex.EncodeToString(sum[:8]), now: time.Now}, nil
}

func readKey(path string) (*ecdsa.PrivateKey, error) {
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
	data := make([]byte, 4096)
	n, _ := f.Read(data)
	block, _ := pem.Decode(data[:n])
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM key", path)
	}
	return x509.ParseECPrivateKey(block.Bytes)
}

func newKey(path string) (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	err = pem.Encode(f, &pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return key, err
}

// URL is the issuer's URL.
func (is *Issuer) URL() string { return is.url }

// Claims are what a minted token says.
type Claims struct {
	Subject  string    // the caller and the job: "TENANT:sha256:DIGEST"
	Audience string    // from the reference
	Scopes   []string  // from the reference
	Deadline time.Time // the job's; the token expires Skew after it
}

// Mint returns a signed token.
func (is *Issuer) Mint(c Claims) (string, error) {
	now := is.now()
	var jti [12]byte
	if _, err := rand.Read(jti[:]); err != nil {
		return "", err
	}
	header := map[string]string{"alg": "ES256", "typ": "JWT", "kid": is.kid}
	claims := map[string]any{
		"iss": is.url,
		"sub": c.Subject,
		"aud": c.Audience,
		"iat": now.Unix(),
		"nbf": now.Unix(),
		"exp": c.Deadline.Add(Skew).Unix(),
		"jti": hex.EncodeToString(jti[:]),
	}
	if len(c.Scopes) > 0 {
		claims["scope"] = strings.Join(c.Scopes, " ")
	}
	h, _ := json.Marshal(header)
	p, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString(h) + "." + enc.EncodeToString(p)
	sum := sha256.Sum256([]byte(signing))
	r, s, err := ecdsa.Sign(rand.Reader, is.key, sum[:])
	if err != nil {
		return "", err
	}
	// JWS ES256: r and s, each 32 bytes big-endian.
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return signing + "." + enc.EncodeToString(sig), nil
}

// ServeHTTP answers discovery and the JWKS; it is mounted at
// /.well-known/ of the executor.
func (is *Issuer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var v any
	switch {
	case strings.HasSuffix(r.URL.Path, "/.well-known/openid-configuration"):
		v = map[string]any{
			"issuer":                                is.url,
			"jwks_uri":                              is.url + "/.well-known/jwks.json",
			"response_types_supported":              []string{"id_token"},
			"subject_types_supported":               []string{"public"},
			"id_token_signing_alg_values_supported": []string{"ES256"},
			"claims_supported":                      []string{"iss", "sub", "aud", "exp", "iat", "nbf", "jti", "scope"},
		}
	case strings.HasSuffix(r.URL.Path, "/.well-known/jwks.json"):
		pt, err := is.key.PublicKey.Bytes() // 0x04 || X || Y
		if err != nil || len(pt) != 65 {
			http.Error(w, "key", http.StatusInternalServerError)
			return
		}
		enc := base64.RawURLEncoding
		v = map[string]any{"keys": []map[string]string{{
			"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": is.kid,
			"x": enc.EncodeToString(pt[1:33]), "y": enc.EncodeToString(pt[33:]),
		}}}
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=300")
	_ = json.NewEncoder(w).Encode(v)
}

// peerKey carries the caller's uid in a request's context, from the
// executor's listener to its tier (the token's subject names it).
type peerKey struct{}

// WithPeer returns ctx carrying the caller's identity (for example
// "uid-1000"), which the executor's tier puts in OIDC subjects.
func WithPeer(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, peerKey{}, who)
}

func peerOf(ctx context.Context) string {
	if s, ok := ctx.Value(peerKey{}).(string); ok {
		return s
	}
	return "unknown"
}
