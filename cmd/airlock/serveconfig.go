//go:build !lean

package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/internal/tierset"
	"github.com/airlock-sandbox/airlock/server"
	"github.com/airlock-sandbox/airlock/tiers/account"
)

// configTiers returns the settings a server's configuration builds its
// tiers with: its limits and its tier_settings.
func configTiers(cfg *server.Config) tierset.Options {
	o := tierset.Options{Limits: cfg.TierLimits(), Accounts: configAccounts(cfg.Accounts)}
	if s := cfg.TierSettings; s != nil {
		o.ProcessPool, o.GVisorPool, o.MicroVMWarm, o.MicroVMPool = s.ProcessPool, s.GVisorPool, s.MicroVMWarm, s.MicroVMPool
		o.ProcessImagePools, o.GVisorImagePools, o.MicroVMImagePools = s.ImagePools["process"], s.ImagePools["gvisor"], s.ImagePools["microvm"]
	}
	return o
}

// newServer builds the tiers for cfg, with the flags that were set over
// its tier_settings, and the server over them, which then owns them.
func newServer(cfg server.Config, tf *tierFlags, opts server.Options) (*server.Server, error) {
	st, err := serverImages(cfg.Images, tf.images, tf.registryAuth)
	if err != nil {
		return nil, err
	}
	base := configTiers(&cfg)
	base.Images, opts.Images = st, st
	o, err := tf.options(base)
	if err != nil {
		return nil, err
	}
	if err := checkPoolImages(st, o); err != nil {
		return nil, err
	}
	tiers, err := tierset.Build(o)
	if err != nil {
		return nil, err
	}
	srv, err := server.New(cfg, tiers, opts)
	if err != nil {
		_ = tierset.Close(tiers)
		return nil, err
	}
	return srv, nil
}

// configAccounts are the account tier's configurations for a server's
// accounts section: a socket and uid, a URL with its certificates, or the
// account as `airlock account add` registered it.
func configAccounts(as []server.Account) []account.Config {
	var out []account.Config
	for _, a := range as {
		switch {
		case a.Socket != "":
			out = append(out, account.NewConfig(a.Name, a.Socket, *a.UID))
		case a.URL != "":
			out = append(out, account.NewRemoteConfig(a.Name, account.Remote{URL: a.URL, CA: a.CA, Cert: a.Cert, Key: a.Key}))
		default:
			r, err := account.Load(account.Dir(), a.Name)
			if err != nil {
				out = append(out, account.NewConfig(a.Name, "", -1).WithUnavailable(err))
				continue
			}
			out = append(out, account.ConfigOf(r))
		}
	}
	return out
}

// innerTier picks the executor's sandbox: the first level-4 tier that can
// run here under the account's user. gVisor's tier needs root; the
// microVM under TCG runs unprivileged.
func innerTier() (airlock.Tier, error) {
	var why []string
	for _, en := range tierset.Entries() {
		if en.Level != airlock.LevelVirtualisation {
			continue
		}
		if en.Probe != nil {
			if err := en.Probe(tierset.Options{}); err != nil {
				why = append(why, en.Name+": "+err.Error())
				continue
			}
		}
		t, err := en.New(tierset.Options{})
		if err != nil {
			why = append(why, en.Name+": "+err.Error())
			continue
		}
		return t, nil
	}
	return nil, &backendMissing{refusal: &airlock.NotAdmitted{Reason: "no sandbox tier runs under this account"}, missing: why}
}

// accountServe runs an account's executor (airlock account serve), which
// serves the HTTP API to its callers.
func accountServe(ctx context.Context, e *env, dir, name string) error {
	r, err := loadLocal(dir, name, "serve")
	if err != nil {
		return err
	}
	if os.Geteuid() != r.UID {
		return fmt.Errorf("the executor of account %s runs as its user %s (uid %d), not uid %d (start it: airlock account start %s)", name, r.User, r.UID, os.Geteuid(), name)
	}
	if err := account.NoCoreDumps(); err != nil {
		return fmt.Errorf("the executor of account %s: no core dumps: %w", name, err)
	}
	inner, err := innerTier()
	if err != nil {
		return err
	}
	issuer, err := account.LoadIssuer(r.IssuerURL(), r.KeyPath())
	if err != nil {
		tierset.Close([]airlock.Tier{inner})
		return err
	}
	ex := account.NewExecutor(inner, r.StorePath(), issuer)
	key, err := randomKey()
	if err != nil {
		ex.Close()
		return err
	}
	all := []airlock.Situation{airlock.SituationCredentials, airlock.SituationExpression, airlock.SituationInternal, airlock.SituationPublic, airlock.SituationMultiTenant}
	// Approvals are the caller's: it approved the job, references and
	// all, before sending it; the executor has no approvers of its own.
	noRules := []approve.Rule{}
	cfg := server.Config{
		Approvals: &server.Approvals{Rules: &noRules},
		Audit:     filepath.Join(r.Home(), "audit.jsonl"),
		Tenants: []server.Tenant{{Name: "caller", KeySHA256: server.HashKey(key),
			Situation: airlock.SituationCredentials, Situations: all}},
	}
	srv, err := server.New(cfg, []airlock.Tier{ex}, server.Options{})
	if err != nil {
		ex.Close()
		return err
	}
	var tlsCfg *tls.Config
	if r.Listen != "" {
		if tlsCfg, err = r.ServerTLS(); err != nil {
			srv.Close()
			return err
		}
	}
	ln, err := account.Listen(r.Socket(), r.Allow)
	if err != nil {
		srv.Close()
		return err
	}
	// The peer check, or the client certificate's, has already admitted
	// the connection; the server's tenant key stays in this process.
	// Discovery and the JWKS are the issuer's.
	h := ex.Front(srv.Handler())
	hs := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if strings.Contains(req.URL.Path, "/.well-known/") {
				issuer.ServeHTTP(w, req)
				return
			}
			if req.TLS != nil && len(req.TLS.PeerCertificates) > 0 {
				// The client certificate names a remote caller in OIDC
				// subjects.
				req = req.WithContext(account.WithPeer(req.Context(), "cert-"+req.TLS.PeerCertificates[0].Subject.CommonName))
			}
			req.Header.Set("Authorization", "Bearer "+key)
			h.ServeHTTP(w, req)
		}),
		// The caller's uid names it in OIDC subjects.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if cred, err := account.PeerCred(c); err == nil {
				return account.WithPeer(ctx, "uid-"+strconv.Itoa(int(cred.Uid)))
			}
			return ctx
		},
		ReadHeaderTimeout: 10 * time.Second,
	}
	errc := make(chan error, 2)
	remote := ""
	if tlsCfg != nil {
		tln, err := net.Listen("tcp", r.Listen)
		if err != nil {
			ln.Close()
			srv.Close()
			return fmt.Errorf("account %s: listening on %s: %w", name, r.Listen, err)
		}
		remote = fmt.Sprintf(" and https://%s (mutual TLS)", tln.Addr())
		go func() { errc <- hs.Serve(tls.NewListener(account.LimitConns(tln, account.MaxRemoteConns), tlsCfg)) }()
	}
	fmt.Fprintf(e.stderr, "airlock: executor of account %s serving on %s%s as uid %d (inner tier %s; serves %s)\n", name, r.Socket(), remote, r.UID, inner.Name(), r.Allow)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		srv.Close()
		return err
	case <-ctx.Done():
	}
	err = srv.Shutdown(hs)
	os.Remove(r.Socket())
	return err
}
