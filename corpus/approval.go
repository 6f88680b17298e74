package corpus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/approve"
)

// Approval, on a case of the approval area, says how the case's job is
// approved and what changes between the approval and the run. The job as
// written is what was approved; the run then goes through the approval
// gate (approve.Signer.Authorize) with a policy that requires an approval
// for every job, as the server's would.
type Approval struct {
	// Token is valid (the default: a token for this job, tenant and tier),
	// expired, other-tenant (issued to another tenant), other-key (signed
	// by another server), respelled (a valid token written another way the
	// base64 decoder alone would take: a server that redeems tokens by
	// their text would count it as unused) or none.
	Token string `json:"token,omitempty"`
	// Change holds job fields in the wire format that replace the approved
	// job's before it runs (e.g. {"argv": [...]}): a job changed after
	// approval.
	Change json.RawMessage `json:"change,omitempty"`
	// Swap changes placed files after the tier placed them and before it
	// checks them: a swap between approval and execution.
	Swap []Swap `json:"swap,omitempty"`
}

// Swap replaces one placed path: with other content, or with a symbolic
// link to a target (variables such as ${CANARY_FILE} are substituted).
type Swap struct {
	Path    string  `json:"path"`
	Content *string `json:"content,omitempty"`
	Link    string  `json:"link,omitempty"`
}

// ApprovalTenant is the tenant approval cases run as.
const ApprovalTenant = "corpus-tenant"

func (a *Approval) validate() error {
	switch a.Token {
	case "", "valid", "expired", "other-tenant", "other-key", "respelled", "none":
	default:
		return fmt.Errorf("approval token %q (want valid, expired, other-tenant, other-key, respelled or none)", a.Token)
	}
	if len(a.Change) > 0 {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(a.Change, &m); err != nil || len(m) == 0 {
			return fmt.Errorf("approval change must be a non-empty object of job fields")
		}
	}
	for _, s := range a.Swap {
		if p := filepath.Clean(s.Path); s.Path == "" || filepath.IsAbs(p) || p == "." || strings.HasPrefix(p, "..") {
			return fmt.Errorf("swap path %q must be relative and inside the placed files", s.Path)
		}
		if (s.Content == nil) == (s.Link == "") {
			return fmt.Errorf("swap %s needs exactly one of content and link", s.Path)
		}
	}
	return nil
}

// Exec runs job, built from the case with vars, on tier. A case with an
// approval goes through the approval gate: job is approved, then changed
// and swapped as the case says, then authorised and run.
//
// A case with jobs to run before it runs them and then job in one session
// of tier (see [Case.Before]); the session is closed before Exec returns.
func (c *Case) Exec(ctx context.Context, tier airlock.Tier, job airlock.Job, vars map[string]string) (airlock.Result, error) {
	if len(c.Before) > 0 {
		s, err := c.session(ctx, tier, vars)
		if err != nil {
			res := airlock.Result{Tier: tier.Name(), Level: tier.Level()}
			res.SetError(err)
			return res, err
		}
		defer s.Close()
		tier = inSession{tier, s}
	}
	if c.Approval == nil {
		return tier.Run(ctx, job)
	}
	refuse := func(err error) (airlock.Result, error) {
		res := airlock.Result{Tier: tier.Name(), Level: tier.Level()}
		res.SetError(err)
		return res, err
	}
	a := c.Approval
	signer, err := approve.NewSigner(nil)
	if err != nil {
		return refuse(err)
	}
	now := time.Now()
	claims := approve.Claims{Digest: approve.Of(&job, tier.Name(), ApprovalTenant), Tenant: ApprovalTenant, Expires: now.Add(time.Hour)}
	issuer := signer
	switch a.Token {
	case "expired":
		claims.Expires = now.Add(-time.Second)
	case "other-tenant":
		claims.Tenant = "another-tenant"
	case "other-key":
		if issuer, err = approve.NewSigner(nil); err != nil {
			return refuse(err)
		}
	}
	token := issuer.Issue(claims)
	switch a.Token {
	case "none":
		token = ""
	case "respelled":
		// A line break inside: base64's decoder skips it.
		token = token[:8] + "\n" + token[8:]
	}
	run := job
	if len(a.Change) > 0 {
		if run, err = c.changed(vars); err != nil {
			return refuse(err)
		}
	}
	everyJob := approve.Policy{Rules: []approve.Rule{{Name: "every-job"}}}
	ctx, _, err = signer.Authorize(ctx, everyJob, &run, tier.Name(), ApprovalTenant, token, now)
	if err != nil {
		return refuse(err)
	}
	if len(a.Swap) == 0 {
		return tier.Run(ctx, run)
	}
	// The swap happens where an attacker would make it: in the placed
	// files, after placing and before the tier's check of them.
	var called atomic.Bool
	r := replacer(vars)
	approved := ctx // carries the gate's check of the placed files
	ctx = airlock.WithPlacedCheck(ctx, func(dir string) error {
		called.Store(true)
		if err := swap(dir, a.Swap, r); err != nil {
			return fmt.Errorf("swapping placed files: %w", err)
		}
		return airlock.CheckPlaced(approved, dir)
	})
	res, err := tier.Run(ctx, run)
	if !called.Load() && err == nil {
		return refuse(errors.New("approval: the tier never ran the placed-files check, so the swap was never made (it does not re-check placed files)"))
	}
	return res, err
}

// changed is the case's job with the approval's change applied.
func (c *Case) changed(vars map[string]string) (airlock.Job, error) {
	var m, change map[string]json.RawMessage
	if err := json.Unmarshal(c.Job, &m); err != nil {
		return airlock.Job{}, err
	}
	if err := json.Unmarshal(c.Approval.Change, &change); err != nil {
		return airlock.Job{}, err
	}
	for k, v := range change {
		m[k] = v
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return airlock.Job{}, err
	}
	k := *c
	k.Job = raw
	return k.BuildJob(vars)
}

func replacer(vars map[string]string) *strings.Replacer {
	repl := make([]string, 0, 2*len(vars))
	for name, v := range vars {
		repl = append(repl, "${"+name+"}", v)
	}
	return strings.NewReplacer(repl...)
}

// swap makes the case's swaps in dir, as the owner of dir (see asOwner).
func swap(dir string, swaps []Swap, r *strings.Replacer) error {
	return asOwner(dir, func() error {
		for _, s := range swaps {
			p := filepath.Join(dir, filepath.Clean(s.Path))
			if err := os.RemoveAll(p); err != nil {
				return err
			}
			if s.Content != nil {
				if err := os.WriteFile(p, []byte(r.Replace(*s.Content)), 0o644); err != nil {
					return err
				}
				continue
			}
			if err := os.Symlink(r.Replace(s.Link), p); err != nil {
				return err
			}
		}
		return nil
	})
}
