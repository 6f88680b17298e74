package microvm

import (
	"context"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

func TestSmoke(t *testing.T) {
	tier, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := tier.Available(); err != nil {
		t.Fatal(err)
	}
	res, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindCommand, Grants: airlock.Grants{Spawn: true}, Argv: []string{"sh", "-c", "echo hi; uname -r; id; head -2 /proc/meminfo; ls -l /dev; mount; touch /x; pwd; date; cat /sys/fs/cgroup/job/memory.max; head -c 8 /dev/urandom | od -x"}})
	t.Logf("%+v %v", res, err)
}
