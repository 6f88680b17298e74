package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/internal/jobs"
	"github.com/airlock-sandbox/airlock/tiers/account"
)

func init() {
	register(&command{
		name:    "explain",
		summary: "show which tier the router would choose for a job, and why each cheaper one was passed over",
		usage: `explain [--json] [--policy FILE] [job flags] JOB.json|-
       airlock explain [--kind KIND] [job flags: --situation, --tier, --image, --allow-net, --allow-read, --credential, ... as for run]`,
		run: explainCmd,
	})
}

type stringList []string

func (l *stringList) String() string     { return "" }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

// pathList is a repeatable host-path flag (--allow-read, --read): a
// relative path is made absolute against the working directory, as a
// shell user means it; the sandbox sees the host path itself.
type pathList []string

func (l *pathList) String() string { return "" }
func (l *pathList) Set(s string) error {
	if s == "" {
		return errors.New("an empty path")
	}
	abs, err := filepath.Abs(s)
	if err != nil {
		return err
	}
	*l = append(*l, abs)
	return nil
}

func explainCmd(ctx context.Context, e *env) int {
	c := commands["explain"]
	fs := e.flags(c)
	var rf routerFlags
	rf.register(fs)
	jsonMode := fs.Bool("json", false, "write the explanation as JSON")
	kind := fs.String("kind", "command", "job `KIND` when no job file is given")
	// The job flags are run's, with the same meaning: a job explained is
	// the job run would run.
	var jf jobFlags
	jf.register(fs, false)
	pos, rest, code, ok := e.parse(fs)
	if !ok {
		return code
	}
	var job airlock.Job
	switch len(pos) + len(rest) {
	case 0:
		job = airlock.Job{Kind: airlock.Kind(*kind)}
		switch job.Kind {
		case airlock.KindCommand:
			job.Argv = []string{"true"}
		case airlock.KindWasm:
			job.Module = []byte{0}
		default:
			job.Code = "1"
		}
	case 1:
		var src io.Reader = e.stdin
		if name := append(pos, rest...)[0]; name != "-" {
			f, err := os.Open(name)
			if err != nil {
				return e.fail(jobs.Invalid("", "%v", err))
			}
			defer f.Close()
			src = f
		}
		var err error
		if job, err = readJob(src); err != nil {
			return e.fail(err)
		}
	default:
		return e.missingArgs("takes at most one JOB.json (or - for stdin)")
	}
	if err := jf.apply(&job); err != nil {
		return e.fail(err)
	}
	if err := job.Validate(); err != nil {
		return e.fail(err)
	}
	r, closeAll, err := rf.open()
	if err != nil {
		return e.fail(err)
	}
	defer closeAll()
	if err := checkImage(rf.images, job.Image); err != nil {
		return e.fail(err)
	}
	note := implySituation(r, &job, &jf)
	x := r.Explain(&job)
	if *jsonMode {
		if err := writeJSON(e.stdout, x); err != nil {
			return e.fail(err)
		}
	} else {
		if note != "" {
			fmt.Fprintf(e.stdout, "note:      %s\n", note)
		}
		x.Write(e.stdout)
		if acct := accountLine(job, rf.tiers.account); acct != "" {
			fmt.Fprintf(e.stdout, "\n%s\n", acct)
		}
	}
	if x.Chosen == "" {
		return exitNotAdmitted
	}
	return exitOK
}

// accountLine names the account a level-5 job would run under, for a job
// in the credentials situation, naming credentials or an account: the
// job's, else only (--account), else the default.
func accountLine(job airlock.Job, only string) string {
	if job.Situation != airlock.SituationCredentials && len(job.Grants.Credentials) == 0 && job.Tier != account.Name && job.Account == "" {
		return ""
	}
	var r account.Record
	var err error
	switch {
	case job.Account != "" && only != "" && job.Account != only:
		err = fmt.Errorf("the job names account %s, and --account allows only %s", job.Account, only)
	case job.Account != "":
		r, err = account.Load(account.Dir(), job.Account)
	default:
		r, err = account.Selected(account.Dir(), only)
	}
	if err != nil {
		return "account:   none: " + err.Error()
	}
	if r.Remote != nil {
		return fmt.Sprintf("account:   %s (its executor at %s, mutual TLS)", r.Name, r.Remote.URL)
	}
	return fmt.Sprintf("account:   %s (its executor runs as %s, uid %d, on %s)", r.Name, r.User, r.UID, r.Socket())
}

// checkImage refuses, as run would, an image reference the store would
// refuse: run learns it when a tier acquires the image, which explaining
// never does.
func checkImage(store image.Resolver, ref string) error {
	c, ok := store.(image.Checker)
	if ref == "" || !ok {
		return nil
	}
	err := c.Check(ref)
	var ie *image.Error
	if errors.As(err, &ie) && ie.Invalid {
		return jobs.Invalid("image", "%v", err)
	}
	if err != nil {
		return fmt.Errorf("acquiring image: %w", err)
	}
	return nil
}
