// Package admit holds what the OS tiers share about a job before it runs:
// the reasons for not admitting one, so each says the same, and the
// variables a command's program gets.
package admit

import (
	"fmt"

	"github.com/airlock-sandbox/airlock"
)

// Vars is a command job's own variables: its plain env and its secrets
// (disjoint, as preparing the job checks). The tier adds the image's and
// egress's on top.
func Vars(job *airlock.Job) map[string]string {
	if len(job.Env) == 0 {
		return job.Grants.Secrets
	}
	vars := make(map[string]string, len(job.Env)+len(job.Grants.Secrets))
	for k, v := range job.Env {
		vars[k] = v
	}
	for k, v := range job.Grants.Secrets {
		vars[k] = v
	}
	return vars
}

// ClockNotShown is the reason a tier whose programs see the host's real
// time gives for not admitting a job that pins its clock: it would record
// a time the program never saw.
const ClockNotShown = "a pinned clock is not what programs see here (they see the host's real time; the microVM sets its guest's clock): refused rather than recorded"

// FSPlacement refuses grants.fs.at and grants.fs.copy on a tier that does
// not place a read grant at a guest path or copy it: running the job with
// the grant at its host path, or read-only, would be another contract.
const FSPlacement = "grants.fs.at and grants.fs.copy (a read grant at a guest path, or as a writable copy) are not supported here: refused rather than run with the grant at its host path or read-only"

// UsesFSPlacement reports whether a job asks for grants.fs.at or grants.fs.copy.
func UsesFSPlacement(fs airlock.FSGrant) bool { return len(fs.At) > 0 || len(fs.Copy) > 0 }

// maxArgStrlen is Linux's MAX_ARG_STRLEN: execve refuses (E2BIG) an
// argument or environment string of this many bytes or more, with its
// terminating NUL.
const maxArgStrlen = 32 * 4096

// ExecTooLong says why Linux would refuse to start the job's program with
// its arguments and environment, or "": a tier whose programs Linux (or
// gVisor's execve, which keeps the same bound) starts refuses such a job
// rather than report it as the program's failure.
func ExecTooLong(job *airlock.Job) string {
	for i, a := range job.Argv {
		if len(a) >= maxArgStrlen {
			return fmt.Sprintf("argv[%d] is %d bytes; Linux starts no program with an argument of %d bytes or more", i, len(a), maxArgStrlen)
		}
	}
	// Admit must not allocate: the map is scanned as it is, and the
	// first name in order among those too long is named.
	vars, worst := Vars(job), ""
	for name, v := range vars {
		if len(name)+1+len(v) >= maxArgStrlen && (worst == "" || name < worst) {
			worst = name
		}
	}
	if worst != "" {
		return fmt.Sprintf("the variable %s is %d bytes; Linux starts no program with an environment string of %d bytes or more", worst, len(worst)+1+len(vars[worst]), maxArgStrlen)
	}
	return ""
}
