package image

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

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
