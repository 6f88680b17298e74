package account

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// MinValue is the shortest credential value a store holds: a shorter one
// could not be scrubbed from output without redacting ordinary text.
const MinValue = 8

// StoreFile is the credential store's name in the account's directory.
const StoreFile = "credentials.json"

// store is the credential store's file: a JSON object
//
//	{"credentials": {"github-readonly": {"value": "ghp_..."}}}
//
// owned by the account and readable by it alone.
type store struct {
	Credentials map[string]storedCredential `json:"credentials"`
}

type storedCredential struct {
	// Type is "static" (the default: Value is the credential) or "oidc"
	// (a token minted per job for Audience with Scopes, see [Issuer]).
	Type     string   `json:"type,omitempty"`
	Value    string   `json:"value,omitempty"`
	Audience string   `json:"audience,omitempty"`
	Scopes   []string `json:"scopes,omitempty"`
	// Callers, when set, are the only callers that may use the
	// credential, named as in OIDC subjects: "uid-1000" for a local
	// caller, "cert-CN" for a remote one. Absent: every caller the
	// executor serves.
	Callers []string `json:"callers,omitempty"`
}

// loadStore reads the store at path, refusing one that another user owns
// or could read or write: the executor then resolves nothing.
func loadStore(path string) (*store, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("credential store: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("credential store: %w", err)
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("credential store %s is not a regular file", path)
	case sys == nil || int(sys.Uid) != os.Geteuid():
		return nil, fmt.Errorf("credential store %s is not owned by this account (uid %d): refused", path, os.Geteuid())
	case st.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("credential store %s has mode %04o, which lets others read or write it: refused (chmod 600 %s)", path, st.Mode().Perm(), path)
	}
	var s store
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("credential store %s: %w", path, err)
	}
	for ref, c := range s.Credentials {
		if c.Type == "oidc" {
			if c.Audience == "" || c.Value != "" {
				return nil, fmt.Errorf("credential store %s: %s: an oidc credential has an audience (and scopes), no value", path, ref)
			}
			continue
		}
		switch {
		case c.Type != "" && c.Type != "static":
			return nil, fmt.Errorf("credential store %s: %s: unknown type %q (want static or oidc)", path, ref, c.Type)
		case len(c.Value) < MinValue:
			return nil, fmt.Errorf("credential store %s: %s: a value shorter than %d bytes cannot be scrubbed from output reliably", path, ref, MinValue)
		case bytes.IndexByte([]byte(c.Value), 0) >= 0:
			return nil, fmt.Errorf("credential store %s: %s: value contains a NUL byte", path, ref)
		}
	}
	return &s, nil
}

// lookup returns the stored credential ref.
func (s *store) lookup(ref string) (storedCredential, error) {
	c, ok := s.Credentials[ref]
	if !ok {
		return c, fmt.Errorf("no credential %q in this account's store", ref)
	}
	return c, nil
}

// resolve returns the value of a static ref.
func (s *store) resolve(ref string) (string, error) {
	c, err := s.lookup(ref)
	if err == nil && c.Type == "oidc" {
		err = fmt.Errorf("credential %q is minted per job, not stored", ref)
	}
	return c.Value, err
}

// AddStatic writes (or replaces) the static credential ref in the store
// at path, creating the store with mode 0600; it never logs the value.
// It is for set-up as the account's owner (root) and for tests.
func AddStatic(path, ref, value string, uid, gid int) error {
	if len(value) < MinValue {
		return fmt.Errorf("credential %s: a value shorter than %d bytes cannot be scrubbed from output reliably", ref, MinValue)
	}
	return add(path, ref, storedCredential{Value: value}, uid, gid)
}

// AddOIDC writes (or replaces) the OIDC credential ref: each job that
// names it gets a token minted for audience with scopes.
func AddOIDC(path, ref, audience string, scopes []string, uid, gid int) error {
	if audience == "" {
		return fmt.Errorf("credential %s: an oidc credential needs an audience", ref)
	}
	return add(path, ref, storedCredential{Type: "oidc", Audience: audience, Scopes: scopes}, uid, gid)
}

// SetCallers limits the stored credential ref to callers (see
// storedCredential.Callers); none lifts the limit.
func SetCallers(path, ref string, callers []string, uid, gid int) error {
	s, err := readStoreOwn(path, uid)
	if err != nil {
		return err
	}
	c, err := s.lookup(ref)
	if err != nil {
		return err
	}
	c.Callers = callers
	return add(path, ref, c, uid, gid)
}

// readStoreOwn reads the store at path for root, who changes it (see
// openOwn): a link, or a file the account (uid) does not own, is refused;
// a missing store is empty.
func readStoreOwn(path string, uid int) (*store, error) {
	s := &store{Credentials: map[string]storedCredential{}}
	root, err := openOwn(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer root.Close()
	data, err := readOwn(root, filepath.Base(path), uid)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("credential store: %w", err)
	}
	if err := json.Unmarshal(data, s); err != nil {
		return nil, fmt.Errorf("credential store %s: %w", path, err)
	}
	if s.Credentials == nil {
		s.Credentials = map[string]storedCredential{}
	}
	return s, nil
}

func add(path, ref string, c storedCredential, uid, gid int) error {
	s, err := readStoreOwn(path, uid)
	if err != nil {
		return err
	}
	s.Credentials[ref] = c
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	root, err := openOwn(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer root.Close()
	return writeOwn(root, filepath.Base(path), data, 0o600, uid, gid)
}

// emptyStore writes an empty store as name in root if there is none.
func emptyStore(root *os.Root, name string, uid, gid int) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = f.WriteString("{\"credentials\": {}}\n")
	if err == nil {
		err = f.Chown(uid, gid)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
