package account

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/replacefile"
	"github.com/airlock-sandbox/airlock/internal/statedir"
)

// DefaultDir is where accounts are registered unless AIRLOCK_ACCOUNTS
// names another directory.
const DefaultDir = "/var/lib/airlock/accounts"

// Dir returns the accounts directory.
func Dir() string {
	if d := os.Getenv("AIRLOCK_ACCOUNTS"); d != "" {
		return d
	}
	return DefaultDir
}

// Record is a registered account, in DIR/NAME.json (owned by root,
// readable by all: it holds no secret). The account's own directory,
// DIR/NAME (mode 0700, owned by the account), holds its credential store,
// its executor's audit file and its tiers' state; DIR/NAME.run (mode
// 0755) holds the executor's socket.
type Record struct {
	Name  string `json:"name"`
	User  string `json:"user"`
	UID   int    `json:"uid"`
	GID   int    `json:"gid"`
	Allow Allow  `json:"allow"`
	// Issuer is the URL in the `iss` of the account's OIDC tokens, where
	// verifiers find discovery (empty: IssuerURL's default).
	Issuer string `json:"issuer,omitempty"`
	// Listen is a TCP address where the executor also serves over HTTPS
	// with mutual TLS, for callers on other machines (empty: its socket
	// only).
	Listen string `json:"listen,omitempty"`
	// Remote, set, makes this a caller's record of an account whose
	// executor runs on another machine: no user, store or socket here.
	Remote *Remote `json:"remote,omitempty"`
	dir    string
}

// IsRemote reports whether the account's executor runs elsewhere.
func (r Record) IsRemote() bool { return r.Remote != nil }

// IssuerURL is the issuer of the account's OIDC tokens: Issuer, or by
// default http://airlock-NAME, a name for the executor itself, whose
// discovery and JWKS it serves on its socket.
func (r Record) IssuerURL() string {
	if r.Issuer != "" {
		return r.Issuer
	}
	return "http://" + UserName(r.Name)
}

// KeyPath is the account's OIDC signing key.
func (r Record) KeyPath() string { return filepath.Join(r.Home(), "oidc-key.pem") }

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,23}$`)

// CheckName refuses an account name that cannot also name an OS user.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("account name %q: want a lower-case letter, then up to 23 lower-case letters, digits or '-'", name)
	}
	return nil
}

// UserName is the OS user an account runs as.
func UserName(name string) string { return "airlock-" + name }

// Home is the account's own directory.
func (r Record) Home() string { return filepath.Join(r.dir, r.Name) }

// RunDir holds the executor's socket.
func (r Record) RunDir() string { return filepath.Join(r.dir, r.Name+".run") }

// Socket is the executor's socket.
func (r Record) Socket() string { return filepath.Join(r.RunDir(), "executor.sock") }

// StorePath is the account's credential store.
func (r Record) StorePath() string { return filepath.Join(r.Home(), StoreFile) }

// Load reads account name from dir.
func Load(dir, name string) (Record, error) {
	if err := CheckName(name); err != nil {
		return Record{}, err
	}
	// The record names the uid whose executor gets the account's jobs:
	// only one nobody else could have written or replaced is believed.
	file := filepath.Join(dir, name+".json")
	err := statedir.File(file)
	if errors.Is(err, os.ErrNotExist) {
		return Record{}, fmt.Errorf("no account %s (add it: airlock account add %s)", name, name)
	}
	if err != nil {
		return Record{}, fmt.Errorf("account %s: %w", name, err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return Record{}, err
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return Record{}, fmt.Errorf("account %s: %w", name, err)
	}
	if r.Name != name {
		return Record{}, fmt.Errorf("account file %s.json names account %q", name, r.Name)
	}
	r.dir = dir
	return r, nil
}

// List returns the accounts registered in dir, by name.
func List(dir string) ([]Record, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || CheckName(name) != nil {
			continue
		}
		r, err := Load(dir, name)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Save writes the record into dir, readable by all.
func (r *Record) Save(dir string) error {
	r.dir = dir
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return replacefile.Write(filepath.Join(dir, r.Name+".json"), 0o644, append(data, '\n'))
}

// Prepare creates the account's directories and an empty credential
// store, owned by the account (it runs as root, from `airlock account
// add`); what exists is kept.
func (r Record) Prepare() error {
	// DIR/NAME and DIR/NAME.run are entries of root's DIR: the account's
	// user cannot replace them. What is inside them is the user's (see
	// openOwn).
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{r.Home(), 0o700}, {r.RunDir(), 0o755}} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return err
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return err
		}
		if err := os.Lchown(d.path, r.UID, r.GID); err != nil {
			return err
		}
	}
	home, err := openOwn(r.Home())
	if err != nil {
		return err
	}
	defer home.Close()
	if err := dirOwn(home, "tmp", 0o700, r.UID, r.GID); err != nil {
		return err
	}
	return emptyStore(home, StoreFile, r.UID, r.GID)
}

// Selected returns the account a caller's job runs under when it names
// none: only, when set (the caller's --account); else the one
// AIRLOCK_ACCOUNT names; else the only one registered. The error says how
// to add or choose one.
func Selected(dir, only string) (Record, error) {
	if only == "" {
		only = os.Getenv("AIRLOCK_ACCOUNT")
	}
	if only != "" {
		return Load(dir, only)
	}
	all, err := List(dir)
	if err != nil {
		return Record{}, err
	}
	switch len(all) {
	case 0:
		return Record{}, errNoAccount
	case 1:
		return all[0], nil
	}
	return Record{}, fmt.Errorf("%d accounts are configured (%s): choose one with --account NAME (or AIRLOCK_ACCOUNT=NAME), or name it in the job", len(all), strings.Join(names(all), ", "))
}

var errNoAccount = errors.New("no account is configured (add one as root: airlock account add NAME, then airlock account start NAME)")

func names(rs []Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name
	}
	return out
}

// ConfigOf returns the configuration that reaches the account's executor.
func ConfigOf(r Record) Config {
	if r.Remote != nil {
		return NewRemoteConfig(r.Name, *r.Remote)
	}
	return NewConfig(r.Name, r.Socket(), r.UID)
}

// FromRegistered returns the account tier over the accounts registered in
// dir. With only set (the caller's --account), it reaches that account
// alone; otherwise every registered account, a job that names none
// running under the one Selected returns (with several and none chosen, a
// job must name its account). Without an account, the tier is unavailable
// and says why.
func FromRegistered(dir, only string) *Tier {
	if only != "" {
		r, err := Load(dir, only)
		if err != nil {
			return New(NewConfig("", "", -1).WithUnavailable(err))
		}
		return New(ConfigOf(r))
	}
	all, err := List(dir)
	if err != nil {
		return New(NewConfig("", "", -1).WithUnavailable(err))
	}
	cfgs := make([]Config, len(all))
	for i, r := range all {
		cfgs[i] = ConfigOf(r)
	}
	def, err := Selected(dir, "")
	if err != nil {
		return New(NewConfig("", "", -1).WithUnavailable(err), cfgs...)
	}
	return New(ConfigOf(def), cfgs...)
}
