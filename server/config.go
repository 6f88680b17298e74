package server

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/egress/sanitize"
	"github.com/airlock-sandbox/airlock/escalate"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/jsonkeys"
	"github.com/airlock-sandbox/airlock/internal/mcpwrap"
	"github.com/google/go-containerregistry/pkg/name"
)

// Config is the server's configuration file (YAML or JSON). Durations are
// Go duration strings ("30s").
type Config struct {
	// Listen is the address to serve on (default 127.0.0.1:8420).
	Listen string `json:"listen,omitempty"`
	// Audit is the file every run appends one JSON line to ("-": stderr,
	// empty: no audit file; records are still kept in memory per tenant).
	Audit string `json:"audit,omitempty"`
	// AuditSync fsyncs the audit file after each (group) write, before
	// the runs it carries are answered: records then survive a power loss
	// or kernel crash too, at the cost of a disk flush per write.
	AuditSync bool `json:"audit_sync,omitempty"`
	// AuditRotation rotates the audit file by size and age and bounds the
	// rotated files kept (defaults: see [AuditRotation]).
	AuditRotation *AuditRotation `json:"audit_rotation,omitempty"`
	// AuditFailOpen answers runs even when their records cannot be
	// written (counted by airlock_audit_write_errors_total). By default
	// the server fails closed: such runs are refused with 503.
	AuditFailOpen bool `json:"audit_fail_open,omitempty"`
	// Policy is a routing policy file; empty: the built-in policy.
	Policy string `json:"policy,omitempty"`
	// Limits is the operator's limit policy: the tiers are built with it
	// (see [Config.TierLimits]) and tenants' limits are taken over it.
	Limits *LimitPolicy `json:"limits,omitempty"`
	// Approvals says which jobs need an approval, and for how long one holds.
	Approvals *Approvals `json:"approvals,omitempty"`
	// SessionTTL closes a session (an API or MCP one) idle this long
	// (default 10m).
	SessionTTL Duration `json:"session_ttl,omitempty"`
	// MaxSessions bounds open sessions per tenant (default 16).
	MaxSessions int `json:"max_sessions,omitempty"`
	// ShutdownGrace is how long running jobs may finish on shutdown
	// before they are cancelled (default 10s).
	ShutdownGrace Duration `json:"shutdown_grace,omitempty"`
	// State is where replicas of one service share approvals' redemptions,
	// rate budgets and the session registry: empty for the embedded store
	// (a single replica), or PostgreSQL as a postgres:// URL or a key=value
	// DSN (a Unix socket: "host=/run/postgresql dbname=airlock"). "env:NAME"
	// takes it from the environment variable NAME, so that a password
	// stays out of the file. See docs/deployment.md.
	State string `json:"state,omitempty"`
	// ReplicaID names this replica in every answer (the Airlock-Replica
	// header) and audit record (default: the host name).
	ReplicaID string `json:"replica_id,omitempty"`
	// Advertise is the base URL the other replicas reach this one at
	// ("http://10.0.0.7:8420"), to forward requests for its sessions;
	// "env:NAME" as for State.
	Advertise string `json:"advertise,omitempty"`
	// SessionLease is how long a replica's claim on its sessions holds
	// unrenewed: a session whose replica died is reported lost once it
	// has lapsed (default 30s).
	SessionLease Duration `json:"session_lease,omitempty"`
	// QueueWait is how long a run waits for a free slot of its tenant
	// before it is refused with 429 (default 1s).
	QueueWait Duration `json:"queue_wait,omitempty"`
	// OutputHosts are the hosts links and images in MCP tool output may
	// point to; every other URL is neutralised by the output sanitiser,
	// and so is a URL on one of them whose query, fragment or path
	// carries a URL or host name that is not allowed (an open redirect).
	// "relaxed:HOST" allows HOST and lets its URLs carry any (see
	// sanitize.Relaxed).
	OutputHosts []string `json:"output_hosts,omitempty"`
	// TierSettings are what `airlock serve` and `airlock mcp` build the
	// server's tiers with; a program that builds its own tiers for [New]
	// has no use for them.
	TierSettings *TierSettings `json:"tier_settings,omitempty"`
	// Images is the image store `airlock serve` and `airlock mcp` give the
	// tiers for command jobs (see docs/images.md); like TierSettings, a
	// program that builds its own tiers passes its store in Options.
	Images *ImageSettings `json:"images,omitempty"`
	// Accounts are the accounts whose executors level-5 jobs run under
	// (see docs/account.md), the first the default; a tenant reaches only
	// those its own accounts list names. Empty: `airlock serve` reaches
	// the accounts `airlock account add` registered.
	Accounts []Account `json:"accounts,omitempty"`
	// Tenants are the API's clients.
	Tenants []Tenant `json:"tenants"`

	source string // the file it was loaded from, which no job may read
}

// Account is how the server reaches one account's executor: on this
// machine by its Unix socket, served by the account's uid (checked with
// SO_PEERCRED); on another over HTTPS with mutual TLS (URL, the pinned CA,
// the client certificate and key); or, with neither, as `airlock account
// add` registered it.
type Account struct {
	Name   string `json:"name"`
	Socket string `json:"socket,omitempty"`
	// UID is the uid the executor on Socket must run as.
	UID  *int   `json:"uid,omitempty"`
	URL  string `json:"url,omitempty"`
	CA   string `json:"ca,omitempty"`
	Cert string `json:"cert,omitempty"`
	Key  string `json:"key,omitempty"`
}

func (a *Account) validate(where string) error {
	if j := (airlock.Job{Kind: airlock.KindExpr, Code: "1", Account: a.Name}); a.Name == "" || j.Validate() != nil {
		return fmt.Errorf("%s.name: %q: want a lower-case letter, then up to 23 lower-case letters, digits or '-'", where, a.Name)
	}
	remote := a.URL != "" || a.CA != "" || a.Cert != "" || a.Key != ""
	switch {
	case a.Socket != "" && remote:
		return fmt.Errorf("%s: a socket or a url (with ca, cert and key), not both", where)
	case a.Socket != "" && a.UID == nil:
		return fmt.Errorf("%s.uid: the uid the executor on %s runs as is required", where, a.Socket)
	case a.Socket == "" && a.UID != nil:
		return fmt.Errorf("%s.uid: only with a socket", where)
	case remote && (a.URL == "" || a.CA == "" || a.Cert == "" || a.Key == ""):
		return fmt.Errorf("%s: a remote account needs url, ca, cert and key", where)
	case a.UID != nil && *a.UID < 0:
		return fmt.Errorf("%s.uid: must not be negative", where)
	}
	return nil
}

// TierSettings are the tiers' warm capacity in the configuration file.
// Zero values build every tier cold, which suits one-shot use; a
// long-lived server keeps sandboxes ready.
type TierSettings struct {
	// ProcessPool is how many started sandboxes the container tier
	// ("process") keeps ready, 0 to 64.
	ProcessPool int `json:"process_pool,omitempty"`
	// GVisorPool is how many started sandboxes the gVisor tier keeps ready.
	GVisorPool int `json:"gvisor_pool,omitempty"`
	// MicroVMWarm is how microVMs start: "cold" (the default) or
	// "snapshot" (restore a snapshot of a booted VM).
	MicroVMWarm string `json:"microvm_warm,omitempty"`
	// MicroVMPool is how many booted VMs the microVM tier keeps ready.
	MicroVMPool int `json:"microvm_pool,omitempty"`
	// ImagePools keep sandboxes of named images ready beside the default
	// image's (the pools above), per tier and image reference:
	// {gvisor: {node: 1}}. The container ("process"), gVisor and microVM
	// tiers keep them.
	ImagePools map[string]map[string]int `json:"image_pools,omitempty"`
}

// imagePoolTiers are the tiers that keep pools per image.
var imagePoolTiers = []string{"gvisor", "microvm", "process"}

func (ts *TierSettings) validate() error {
	if ts == nil {
		return nil
	}
	for _, tier := range slices.Sorted(maps.Keys(ts.ImagePools)) {
		if !slices.Contains(imagePoolTiers, tier) {
			return fmt.Errorf("tier_settings.image_pools: tier %q keeps no pools per image (want one of %s)", tier, strings.Join(imagePoolTiers, ", "))
		}
		pools := ts.ImagePools[tier]
		for _, ref := range slices.Sorted(maps.Keys(pools)) {
			if err := checkImageRef(ref); err != nil {
				return fmt.Errorf("tier_settings.image_pools.%s: %w", tier, err)
			}
			if n := pools[ref]; n < 0 || n > 64 {
				return fmt.Errorf("tier_settings.image_pools.%s.%s: %d: want a pool size from 0 to 64", tier, ref, n)
			}
		}
	}
	return nil
}

// ImageSettings configure the image store command jobs run in.
type ImageSettings struct {
	// Dir is the store's directory (default: $AIRLOCK_IMAGES, else
	// /var/lib/airlock/images for root and the user's cache directory
	// otherwise).
	Dir string `json:"dir,omitempty"`
	// Default is the image of a command job that names none (default:
	// python where the store holds it).
	Default string `json:"default,omitempty"`
	// AllowHost offers the host's own software as the image "host", for
	// internal tooling (default: not offered).
	AllowHost bool `json:"allow_host,omitempty"`
	// AllowTags lets jobs name registry images by tag rather than pinned
	// by digest (default: refused).
	AllowTags bool `json:"allow_tags,omitempty"`
	// MaxMB caps the store's size; unnamed images not in use are evicted,
	// least recently used first (0: the store's default).
	MaxMB int64 `json:"max_mb,omitempty"`
	// AuthFile is the registry credentials file of pulls, in docker's
	// config.json format (image.Options.AuthFile); registries it does not
	// name are pulled from anonymously.
	AuthFile string `json:"auth_file,omitempty"`
	// Registries are the registries (host or host:port, as references
	// name them; docker.io for Docker Hub) a job may name an image in and
	// have it pulled (default: none). A pull is a request from the
	// server's own network position, so a tenant may not aim it anywhere
	// else: a reference to another registry is refused before anything
	// is fetched, unless it is the default image or the tenant's images
	// list names it.
	Registries []string `json:"registries,omitempty"`
}

// TierLimits is the operator's limit policy the tiers are to be built
// with: the configuration's limits over airlock.DefaultLimitPolicy.
func (c *Config) TierLimits() airlock.LimitPolicy {
	return c.Limits.policy(airlock.DefaultLimitPolicy())
}

// LimitPolicy is airlock.LimitPolicy in the configuration file.
type LimitPolicy struct {
	Default airlock.Limits `json:"default,omitzero"`
	Max     airlock.Limits `json:"max,omitzero"`
}

func (l *LimitPolicy) policy(base airlock.LimitPolicy) airlock.LimitPolicy {
	if l == nil {
		return base
	}
	return airlock.LimitPolicy{Default: fill(l.Default, base.Default), Max: fill(l.Max, base.Max)}
}

func fill(l, base airlock.Limits) airlock.Limits {
	pick := func(v, b int64) int64 {
		if v == 0 {
			return b
		}
		return v
	}
	return airlock.Limits{
		WallMS: pick(l.WallMS, base.WallMS), CPUMS: pick(l.CPUMS, base.CPUMS),
		MemoryMB: pick(l.MemoryMB, base.MemoryMB), OutputBytes: pick(l.OutputBytes, base.OutputBytes),
		Pids: pick(l.Pids, base.Pids), Files: pick(l.Files, base.Files), Steps: pick(l.Steps, base.Steps),
	}
}

// Approvals configure approvals bound to the exact job.
type Approvals struct {
	// Rules say which jobs need one; absent: approve.DefaultPolicy.
	Rules *[]approve.Rule `json:"rules,omitempty"`
	// TTL is how long an approval token holds (default 15m).
	TTL Duration `json:"ttl,omitempty"`
	// KeyFile holds the HMAC key tokens are signed with (at least 32
	// bytes); empty: a random key per process, so tokens die on restart.
	KeyFile string `json:"key_file,omitempty"`
}

// Tenant is one client of the API with its own quotas.
type Tenant struct {
	Name string `json:"name"`
	// KeySHA256 is the hex SHA-256 of the tenant's API key. Keys are
	// random high-entropy tokens (see `airlock serve --new-key`), so a
	// fast hash is enough; it is compared in constant time.
	KeySHA256 string `json:"key_sha256"`
	// ApproverSHA256 are the hex SHA-256 of keys that may approve this
	// tenant's jobs (POST /v1/approvals/{digest}/approve).
	ApproverSHA256 []string `json:"approver_sha256,omitempty"`
	// MaxConcurrent bounds the tenant's runs in flight (default 4).
	MaxConcurrent int `json:"max_concurrent,omitempty"`
	// RunsPerMinute bounds the rate of runs (0: unlimited).
	RunsPerMinute int `json:"runs_per_minute,omitempty"`
	// Limits are the defaults and maxima the tenant may ask for; a
	// maximum above the server's is capped by the tiers.
	Limits *LimitPolicy `json:"limits,omitempty"`
	// Situation is what a job that names none runs as (default public).
	// It is the operator's word on who writes the tenant's code; the
	// MCP tools always run as it.
	Situation airlock.Situation `json:"situation,omitempty"`
	// Situations are the only situations the tenant's jobs may name
	// (default: Situation alone). Tiers, when set, are the only tiers
	// it may use.
	Situations []airlock.Situation `json:"situations,omitempty"`
	Tiers      []string            `json:"tiers,omitempty"`
	// ReadRoots are the host directories the tenant's jobs may name in
	// grants.fs.read (default: none). A grant is resolved to the real
	// path it names; one outside every root, or touching a path the
	// server keeps (its configuration, keys, audit, policy, the tiers'
	// state), is refused.
	ReadRoots []string `json:"read_roots,omitempty"`
	// Images are the only images the tenant's command jobs may run in:
	// catalogue names, references pinned by digest, or "host" where the
	// server offers it (default: any the server offers). A job that names
	// none runs in the server's default, which must then be listed.
	Images []string `json:"images,omitempty"`
	// Accounts are the only accounts the tenant's level-5 jobs may run
	// under (default: none); a job that names none runs under the first.
	// A job naming another is refused before it is routed.
	Accounts []string `json:"accounts,omitempty"`
	// MCPIsolation lets the tenant's MCP clients pass "situation" and
	// "tier" (default: the tools do not take them, so whoever the agent
	// obeys cannot lower the boundary).
	MCPIsolation bool `json:"mcp_isolation,omitempty"`
	// MCPSpawn gives the command jobs of the tenant's MCP tools the spawn
	// grant, so a shell script may run other programs (default: withheld;
	// what argv[0] executes fails with status 126).
	MCPSpawn bool `json:"mcp_spawn,omitempty"`
	// MCPWrapped are third-party MCP servers the tenant's agents reach at
	// /mcp/wrapped/NAME over streamable HTTP: each MCP session gets its
	// own instance, run attached in a sandbox, under the server's tool
	// policy (see docs/mcp-wrap.md).
	MCPWrapped []WrappedServer `json:"mcp_wrapped,omitempty"`
}

// WrappedServer is a third-party MCP server run in a sandbox for a tenant.
// The operator declares it: its grants are not checked against the
// tenant's read roots.
type WrappedServer struct {
	// Name is the server's path segment: /mcp/wrapped/NAME.
	Name string `json:"name"`
	// Argv is the server's command; it speaks MCP on stdin and stdout.
	Argv []string `json:"argv"`
	// Image is the environment it runs in (default: the server's).
	Image string `json:"image,omitempty"`
	// Situation it runs as (default: the tenant's); Tier, when set, is
	// the tier it runs on instead of the router's choice.
	Situation airlock.Situation `json:"situation,omitempty"`
	Tier      string            `json:"tier,omitempty"`
	// Grants are its sandbox's grants: read paths, egress by host and
	// method, secrets.
	Grants airlock.Grants `json:"grants,omitzero"`
	// Policy is the per-tool policy.
	Policy mcpwrap.Policy `json:"policy,omitzero"`
	// OutputHosts are the hosts links and images in its results may point
	// to (default: the server's output_hosts).
	OutputHosts []string `json:"output_hosts,omitempty"`
	// CallTimeout bounds one tools/call (default 60s); MaxResultBytes caps
	// a result's text (default 256 KiB).
	CallTimeout    Duration `json:"call_timeout,omitempty"`
	MaxResultBytes int      `json:"max_result_bytes,omitempty"`
	// IdleTimeout ends an instance, and its MCP session, once no request
	// has come for this long (default: session_ttl).
	IdleTimeout Duration `json:"idle_timeout,omitempty"`
	// MaxLifetime is the longest an instance lives: its sandbox's wall
	// clock (default, and at most: the tenant's maximum wall_ms).
	MaxLifetime Duration `json:"max_lifetime,omitempty"`
}

func (ws *WrappedServer) validate(where string) error {
	if ws.Name == "" || strings.ContainsAny(ws.Name, " /\t\n?#%") {
		return fmt.Errorf("%s.name: want a non-empty name without spaces, slashes, ?, # or %%", where)
	}
	j := airlock.Job{Kind: airlock.KindCommand, Argv: ws.Argv, Image: ws.Image, Grants: ws.Grants, Situation: ws.Situation}
	if err := j.Validate(); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if err := ws.Policy.Validate(); err != nil {
		return fmt.Errorf("%s.policy: %w", where, err)
	}
	if _, err := sanitize.New(ws.OutputHosts...); err != nil {
		return fmt.Errorf("%s.output_hosts: %w", where, err)
	}
	if ws.CallTimeout < 0 || ws.MaxResultBytes < 0 || ws.IdleTimeout < 0 || ws.MaxLifetime < 0 {
		return fmt.Errorf("%s: timeouts and limits must not be negative", where)
	}
	return nil
}

// situations returns the situations the tenant may use, and the one its
// jobs run as when they name none.
func (t *Tenant) situations() ([]airlock.Situation, airlock.Situation) {
	def := t.Situation
	if def == "" {
		def = airlock.SituationPublic
	}
	if len(t.Situations) == 0 {
		return []airlock.Situation{def}, def
	}
	return t.Situations, def
}

// Duration is a time.Duration written as a Go duration string.
type Duration time.Duration

// UnmarshalJSON reads "30s" (or a number of nanoseconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err2 := json.Unmarshal(b, &n); err2 != nil {
			return fmt.Errorf("want a duration such as \"30s\"")
		}
		*d = Duration(n)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d Duration) or(def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return time.Duration(d)
}

// ParseConfig reads a configuration in YAML or JSON, strictly: unknown
// fields, and fields given twice or in another case, are errors that name
// the field.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return c, fmt.Errorf("empty configuration")
	}
	if trimmed[0] != '{' {
		var generic any
		if err := yaml.Unmarshal(data, &generic); err != nil {
			return c, fmt.Errorf("configuration YAML: %w", err)
		}
		var err error
		if data, err = json.Marshal(generic); err != nil {
			return c, fmt.Errorf("configuration YAML: %w", err)
		}
	}
	if err := jsonkeys.Check(data, reflect.TypeFor[Config]()); err != nil {
		return c, fmt.Errorf("configuration: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("configuration: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return c, fmt.Errorf("configuration: more data after the configuration")
	}
	return c, c.Validate()
}

// LoadConfig reads a configuration file. Relative paths in it are taken
// relative to the file's directory.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading configuration: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return c, fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	if c.source, err = filepath.Abs(path); err != nil {
		return c, err
	}
	dir := filepath.Dir(path)
	rel := func(p *string) {
		if *p != "" && *p != "-" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	rel(&c.Audit)
	rel(&c.Policy)
	if c.Approvals != nil {
		rel(&c.Approvals.KeyFile)
	}
	if c.Images != nil {
		rel(&c.Images.AuthFile)
	}
	for i := range c.Accounts {
		a := &c.Accounts[i]
		rel(&a.Socket)
		rel(&a.CA)
		rel(&a.Cert)
		rel(&a.Key)
	}
	for i := range c.Tenants {
		for j := range c.Tenants[i].ReadRoots {
			rel(&c.Tenants[i].ReadRoots[j])
		}
	}
	return c, nil
}

// Validate checks tenants, keys and approval rules.
func (c *Config) Validate() error {
	if len(c.Tenants) == 0 {
		return fmt.Errorf("no tenants: the API would refuse every request")
	}
	names := map[string]bool{}
	keys := map[string]string{}
	for i, t := range c.Tenants {
		where := fmt.Sprintf("tenants[%d]", i)
		if t.Name == "" || strings.ContainsAny(t.Name, " /\t\n") {
			return fmt.Errorf("%s.name: want a non-empty name without spaces or slashes", where)
		}
		if names[t.Name] {
			return fmt.Errorf("%s.name: two tenants named %q", where, t.Name)
		}
		names[t.Name] = true
		if err := checkHash(t.KeySHA256); err != nil {
			return fmt.Errorf("%s.key_sha256: %w", where, err)
		}
		// Compared as bytes: the hex's letter case does not make another key.
		kb, _ := hex.DecodeString(t.KeySHA256)
		if other, ok := keys[string(kb)]; ok {
			return fmt.Errorf("%s.key_sha256: the same key as tenant %s", where, other)
		}
		keys[string(kb)] = t.Name
		for j, h := range t.ApproverSHA256 {
			if err := checkHash(h); err != nil {
				return fmt.Errorf("%s.approver_sha256[%d]: %w", where, j, err)
			}
		}
		if t.MaxConcurrent < 0 || t.RunsPerMinute < 0 {
			return fmt.Errorf("%s: quotas must not be negative", where)
		}
		// An empty list, written out, reads as "none" but would mean
		// "any" (tiers, images) or "the default" (situations).
		switch {
		case t.Tiers != nil && len(t.Tiers) == 0:
			return fmt.Errorf("%s.tiers: an empty list; leave it out to let the tenant use every tier", where)
		case t.Images != nil && len(t.Images) == 0:
			return fmt.Errorf("%s.images: an empty list; leave it out to let the tenant use every image the server offers", where)
		case t.Situations != nil && len(t.Situations) == 0:
			return fmt.Errorf("%s.situations: an empty list; leave it out for the tenant's situation alone", where)
		}
		for _, s := range t.Situations {
			j := airlock.Job{Kind: airlock.KindExpr, Code: "1", Situation: s}
			if err := j.Validate(); err != nil {
				return fmt.Errorf("%s.situations: unknown situation %q", where, s)
			}
		}
		wnames := map[string]bool{}
		for j := range t.MCPWrapped {
			ws := &t.MCPWrapped[j]
			if err := ws.validate(fmt.Sprintf("%s.mcp_wrapped[%d]", where, j)); err != nil {
				return err
			}
			if wnames[ws.Name] {
				return fmt.Errorf("%s.mcp_wrapped[%d].name: two wrapped servers named %q", where, j, ws.Name)
			}
			wnames[ws.Name] = true
			// It runs as the tenant: on a tier and in a situation the
			// tenant may use.
			if allowed, _ := t.situations(); ws.Situation != "" && !slices.Contains(allowed, ws.Situation) {
				return fmt.Errorf("%s.mcp_wrapped[%d].situation: %s is not among the tenant's situations %v", where, j, ws.Situation, allowed)
			}
			if ws.Tier != "" && len(t.Tiers) > 0 && !slices.Contains(t.Tiers, ws.Tier) {
				return fmt.Errorf("%s.mcp_wrapped[%d].tier: %s is not among the tenant's tiers %v", where, j, ws.Tier, t.Tiers)
			}
		}
		if t.Situation != "" {
			j := airlock.Job{Kind: airlock.KindExpr, Code: "1", Situation: t.Situation}
			if err := j.Validate(); err != nil {
				return fmt.Errorf("%s.situation: unknown situation %q", where, t.Situation)
			}
			if len(t.Situations) > 0 && !slices.Contains(t.Situations, t.Situation) {
				return fmt.Errorf("%s.situation: %s is not among the tenant's situations %v", where, t.Situation, t.Situations)
			}
		}
	}
	// A tenant key listed as an approver would let a tenant approve its
	// own jobs (or another tenant's); keys are compared as bytes, so the
	// hex's letter case does not matter.
	tenantOf := map[string]string{}
	for _, t := range c.Tenants {
		b, _ := hex.DecodeString(t.KeySHA256)
		tenantOf[string(b)] = t.Name
	}
	for i, t := range c.Tenants {
		for j, h := range t.ApproverSHA256 {
			b, _ := hex.DecodeString(h)
			if other, ok := tenantOf[string(b)]; ok {
				return fmt.Errorf("tenants[%d].approver_sha256[%d]: the key of tenant %s: a tenant key may not approve jobs (give approvers keys of their own)", i, j, other)
			}
		}
	}
	if c.SessionLease < 0 {
		return errors.New("session_lease: must not be negative")
	}
	if err := c.AuditRotation.validate(); err != nil {
		return err
	}
	if c.AuditRotation != nil && (c.Audit == "" || c.Audit == "-") {
		return errors.New("audit_rotation: rotation needs an audit file (audit: PATH)")
	}
	if err := c.Images.validate(); err != nil {
		return err
	}
	if err := c.TierSettings.validate(); err != nil {
		return err
	}
	accounts := map[string]bool{}
	for i := range c.Accounts {
		a := &c.Accounts[i]
		if err := a.validate(fmt.Sprintf("accounts[%d]", i)); err != nil {
			return err
		}
		if accounts[a.Name] {
			return fmt.Errorf("accounts[%d].name: two accounts named %q", i, a.Name)
		}
		accounts[a.Name] = true
	}
	for i, t := range c.Tenants {
		for j, name := range t.Accounts {
			if probe := (airlock.Job{Kind: airlock.KindExpr, Code: "1", Account: name}); probe.Validate() != nil {
				return fmt.Errorf("tenants[%d].accounts[%d]: %q is not an account name", i, j, name)
			}
			if len(c.Accounts) > 0 && !accounts[name] {
				return fmt.Errorf("tenants[%d].accounts[%d]: no account %q in accounts", i, j, name)
			}
			if slices.Contains(t.Accounts[:j], name) {
				return fmt.Errorf("tenants[%d].accounts[%d]: %q listed twice", i, j, name)
			}
		}
		for j, ref := range t.Images {
			if err := checkImageRef(ref); err != nil {
				return fmt.Errorf("tenants[%d].images[%d]: %w", i, j, err)
			}
			if ref == image.Host && (c.Images == nil || !c.Images.AllowHost) {
				return fmt.Errorf("tenants[%d].images[%d]: host is offered only with images.allow_host", i, j)
			}
		}
	}
	if _, err := sanitize.New(c.OutputHosts...); err != nil {
		return fmt.Errorf("output_hosts: %w", err)
	}
	if c.Approvals != nil && c.Approvals.Rules != nil {
		if err := (approve.Policy{Rules: *c.Approvals.Rules}).Validate(); err != nil {
			return fmt.Errorf("approvals: %w", err)
		}
	}
	if c.Policy != "" {
		if _, err := os.Stat(c.Policy); err != nil && filepath.IsAbs(c.Policy) {
			return fmt.Errorf("policy: %w", err)
		}
	}
	return nil
}

func (is *ImageSettings) validate() error {
	if is == nil {
		return nil
	}
	if is.MaxMB < 0 {
		return errors.New("images.max_mb: must not be negative")
	}
	for i, r := range is.Registries {
		if _, err := registryOf(r); err != nil {
			return fmt.Errorf("images.registries[%d]: %w", i, err)
		}
	}
	if is.Default != "" {
		if err := checkImageRef(is.Default); err != nil {
			return fmt.Errorf("images.default: %w", err)
		}
		if is.Default == image.Host && !is.AllowHost {
			return errors.New("images.default: host needs images.allow_host")
		}
	}
	return nil
}

// registryOf is a configured registry as references resolve it
// (docker.io is index.docker.io).
func registryOf(host string) (string, error) {
	if host == "" || strings.ContainsAny(host, "/@") {
		return "", fmt.Errorf("%q is not a registry host (want host or host:port)", host)
	}
	r, err := name.NewRegistry(host, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("%q: %v", host, err)
	}
	return r.RegistryStr(), nil
}

// checkImageRef applies the job's own checks on an image reference.
func checkImageRef(ref string) error {
	j := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"}, Image: ref}
	if ref == "" {
		return errors.New("empty image")
	}
	if err := j.Validate(); err != nil {
		var inv *airlock.InvalidJob
		if errors.As(err, &inv) && inv.Reason != "" {
			return errors.New(inv.Reason)
		}
		return err
	}
	return nil
}

// readKey reads a secret key file, refusing one that group or others may
// read or write, as ssh refuses a private key.
func readKey(what, name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if m := st.Mode().Perm(); m&0o077 != 0 {
		return nil, fmt.Errorf("%s: %s is accessible by group or others (mode %04o); chmod 600 it", what, name, m)
	}
	return io.ReadAll(io.LimitReader(f, 1<<20))
}

func checkHash(h string) error {
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != sha256.Size {
		return fmt.Errorf("want 64 hex digits (the SHA-256 of the key)")
	}
	return nil
}

// HashKey returns the hex SHA-256 of an API key, as the configuration
// stores it.
func HashKey(key string) string {
	s := sha256.Sum256([]byte(key))
	return hex.EncodeToString(s[:])
}

// keyring finds the holder of a key, comparing the key's hash against
// every stored hash in constant time.
type keyring struct {
	hashes [][]byte
	owners []int
}

func (k *keyring) add(hexHash string, owner int) {
	b, _ := hex.DecodeString(hexHash)
	k.hashes = append(k.hashes, b)
	k.owners = append(k.owners, owner)
}

func (k *keyring) find(key string) (int, bool) {
	sum := sha256.Sum256([]byte(key))
	found := -1
	for i, h := range k.hashes {
		if subtle.ConstantTimeCompare(sum[:], h) == 1 {
			found = k.owners[i]
		}
	}
	return found, found >= 0
}

func (c *Config) routerPolicy() (escalate.Policy, error) {
	if c.Policy == "" {
		return escalate.DefaultPolicy(), nil
	}
	return escalate.LoadPolicy(c.Policy)
}

func (c *Config) approvalPolicy() approve.Policy {
	if c.Approvals == nil || c.Approvals.Rules == nil {
		return approve.DefaultPolicy()
	}
	return approve.Policy{Rules: slices.Clone(*c.Approvals.Rules)}
}
