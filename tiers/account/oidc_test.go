package account

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// TestOIDC: a minted token verifies with go-oidc through the issuer's own
// discovery and JWKS before its expiry (the job's deadline plus Skew),
// carries the subject, audience and scopes, and fails after it; the key
// survives a restart and a loose key file is refused.
func TestOIDC(t *testing.T) {
	dir := t.TempDir()
	srv := httptest.NewUnstartedServer(nil)
	url := "http://" + srv.Listener.Addr().String()
	is, err := LoadIssuer(url, filepath.Join(dir, "key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = is
	srv.Start()
	defer srv.Close()

	deadline := time.Now().Add(time.Minute)
	tok, err := is.Mint(Claims{Subject: "uid-0:sha256:abc", Audience: "https://api.example", Scopes: []string{"repo:read", "issues:write"}, Deadline: deadline})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, err := oidc.NewProvider(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	idt, err := p.Verifier(&oidc.Config{ClientID: "https://api.example"}).Verify(ctx, tok)
	if err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	var claims struct {
		Scope string `json:"scope"`
	}
	if err := idt.Claims(&claims); err != nil || idt.Subject != "uid-0:sha256:abc" || claims.Scope != "repo:read issues:write" || idt.Issuer != url {
		t.Errorf("claims: sub %q scope %q iss %q (%v)", idt.Subject, claims.Scope, idt.Issuer, err)
	}
	if !idt.Expiry.Equal(deadline.Add(Skew).Truncate(time.Second)) {
		t.Errorf("exp %v, want %v", idt.Expiry, deadline.Add(Skew))
	}
	late := func() time.Time { return deadline.Add(Skew + time.Minute) }
	if _, err := p.Verifier(&oidc.Config{ClientID: "https://api.example", Now: late}).Verify(ctx, tok); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("after expiry: %v, want expired", err)
	}
	if _, err := p.Verifier(&oidc.Config{ClientID: "https://other.example"}).Verify(ctx, tok); err == nil {
		t.Error("a token for another audience verified")
	}
	// A tampered payload fails.
	parts := strings.Split(tok, ".")
	if _, err := p.Verifier(&oidc.Config{ClientID: "https://api.example"}).Verify(ctx, parts[0]+"."+parts[1]+"x."+parts[2]); err == nil {
		t.Error("a tampered token verified")
	}

	again, err := LoadIssuer(url, filepath.Join(dir, "key.pem"))
	if err != nil || again.kid != is.kid {
		t.Errorf("reloaded key: %v, kid %s vs %s", err, again.kid, is.kid)
	}
	os.Chmod(filepath.Join(dir, "key.pem"), 0o644)
	if _, err := LoadIssuer(url, filepath.Join(dir, "key.pem")); err == nil {
		t.Error("a key readable by others was used")
	}
}
