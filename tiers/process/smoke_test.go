package process

import (
	"context"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

func TestSmoke(t *testing.T) {
	for _, mk := range []func(Config) (*Tier, error){New, NewFilter} {
		tier, err := mk(NewConfig())
		if err != nil {
			t.Fatal(err)
		}
		res, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindCommand, Argv: []string{"sh", "-c", "echo hi; id; ls /; pwd; cat /proc/self/status | grep -i -e seccomp -e NoNewPrivs; echo $$; ulimit -a"}})
		t.Logf("%s: err=%v\nstdout=%s\nstderr=%s\nexit=%d timings=%+v", tier.Name(), err, res.Stdout, res.Stderr, res.ExitCode, res.Timings)
	}
}
