package approve

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// Stale is the reason text of every refusal: a token that does not match
// the job, the tenant, or the clock. It is the prefix of the
// [*airlock.NotAdmitted] reason.
const Stale = "approval_stale"

// Required is the reason text when a job needs an approval and has none.
const Required = "approval_required"

// Claims are what a token asserts.
type Claims struct {
	Digest  Digest    `json:"digest"`
	Tenant  string    `json:"tenant"`
	Expires time.Time `json:"expires"`
}

// Signer issues and checks approval tokens with one HMAC key. It is
// immutable and safe for concurrent use.
type Signer struct{ key []byte }

// NewSigner returns a signer with key (at least 32 bytes), or with a fresh
// random key when key is nil (tokens then die with the process).
func NewSigner(key []byte) (*Signer, error) {
	if key == nil {
		key = make([]byte, 32)
		if _, err := io.ReadFull(rand.Reader, key); err != nil {
			return nil, fmt.Errorf("approval key: %w", err)
		}
	}
	if len(key) < 32 {
		return nil, fmt.Errorf("approval key: %d bytes, want at least 32", len(key))
	}
	return &Signer{key: bytes.Clone(key)}, nil
}

var b64 = base64.RawURLEncoding

// Issue returns a token approving the job with digest d for tenant until
// expires. A token is its claims signed: every replica that shares the key
// issues the same token for a decision, and decisions made apart (a job
// approved again, its first token spent) differ in their expiry, kept to
// the microsecond (what the shared state keeps), so their tokens differ.
func (s *Signer) Issue(c Claims) string {
	c.Expires = c.Expires.UTC().Truncate(time.Microsecond)
	body, _ := json.Marshal(c)
	return b64.EncodeToString(body) + "." + b64.EncodeToString(s.mac(body))
}

func (s *Signer) mac(body []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("airlock-approval-v1\x00"))
	m.Write(body)
	return m.Sum(nil)
}

// Check verifies a token for the job with digest d, submitted by tenant at
// now. Every failure is a [*airlock.NotAdmitted] whose reason starts with
// [Stale] and says which check failed.
func (s *Signer) Check(token string, d Digest, tenant string, now time.Time) (Claims, error) {
	var c Claims
	body, mac, ok := splitToken(token)
	if !ok || !hmac.Equal(mac, s.mac(body)) {
		return c, stale("the token is malformed or not signed by this server")
	}
	if err := json.Unmarshal(body, &c); err != nil {
		return c, stale("the token is malformed")
	}
	switch {
	case c.Tenant != tenant:
		return c, stale("the token was issued to another tenant")
	case !now.Before(c.Expires):
		return c, stale("the token expired at " + c.Expires.Format(time.RFC3339))
	case !hmac.Equal([]byte(c.Digest), []byte(d)):
		return c, stale("the job differs from the approved one (digest " + string(d) + ", approved " + string(c.Digest) + ")")
	}
	return c, nil
}

// splitToken decodes a token's two halves. Only the spelling Issue writes
// is accepted: the decoder alone would also take a half with line breaks
// in it or other bits in its last character's padding, and each such
// spelling of one approval would count as a token not yet used.
func splitToken(t string) (body, mac []byte, ok bool) {
	i := bytes.IndexByte([]byte(t), '.')
	if i < 0 || len(t) > 4096 {
		return nil, nil, false
	}
	var err1, err2 error
	body, err1 = b64.DecodeString(t[:i])
	mac, err2 = b64.DecodeString(t[i+1:])
	if err1 != nil || err2 != nil || b64.EncodeToString(body) != t[:i] || b64.EncodeToString(mac) != t[i+1:] {
		return nil, nil, false
	}
	return body, mac, true
}

// staleError is an approval refusal: a *airlock.NotAdmitted (what the
// server answers and audits) that IsStale recognises by its type.
type staleError struct{ na *airlock.NotAdmitted }

func (e *staleError) Error() string { return e.na.Error() }
func (e *staleError) Unwrap() error { return e.na }

func stale(why string) error {
	return &staleError{&airlock.NotAdmitted{Reason: Stale + ": " + why}}
}

// IsStale reports whether err is an approval refusal.
func IsStale(err error) bool {
	var se *staleError
	return errors.As(err, &se)
}
