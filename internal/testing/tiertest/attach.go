package tiertest

import (
	"bufio"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

// PooledAttacher is a tier that attaches jobs and keeps a warm pool.
type PooledAttacher interface {
	airlock.Attacher
	airlock.Pooler
}

// AttachPooled checks, on a tier whose pool keeps a sandbox ready, that
// an attached job without read grants claims a pooled sandbox (a hit) and
// is as live as a cold one: each line is answered before the next is
// sent, and its secret reaches it at the claim. A job with a read grant
// still starts a sandbox of its own.
func AttachPooled(t *testing.T, tier PooledAttacher) {
	t.Helper()
	ctx := context.Background()
	warm := func() {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := tier.WaitWarm(wctx); err != nil {
			t.Fatalf("pool did not fill: %v %+v", err, tier.PoolStats())
		}
	}
	warm()
	hits := tier.PoolStats().Hits
	a, err := tier.Attach(ctx, airlock.Job{Kind: airlock.KindCommand, Argv: []string{"sh", "-c", `echo "secret=$TOKEN"; while read l; do echo "got $l"; done`},
		Grants: airlock.Grants{Secrets: map[string]string{"TOKEN": "pooled-attach-5e1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := tier.PoolStats().Hits; got != hits+1 {
		t.Errorf("hits %d, want %d: the attached job did not claim the pooled sandbox", got, hits+1)
	}
	out := bufio.NewReader(a.Stdout())
	if line, err := out.ReadString('\n'); err != nil || line != "secret=pooled-attach-5e1\n" {
		t.Fatalf("first line: %q, %v", line, err)
	}
	for i := range 3 {
		if _, err := fmt.Fprintf(a.Stdin(), "line %d\n", i); err != nil {
			t.Fatal(err)
		}
		if got, err := out.ReadString('\n'); err != nil || got != fmt.Sprintf("got line %d\n", i) {
			t.Fatalf("answer %d: %q, %v", i, got, err)
		}
	}
	a.Stdin().Close()
	if res, err := a.Wait(); err != nil || res.ExitCode != 0 {
		t.Fatalf("wait: %+v, %v", res, err)
	}

	warm()
	hits = tier.PoolStats().Hits
	a, err = tier.Attach(ctx, airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"},
		Grants: airlock.Grants{FS: airlock.FSGrant{Read: []string{t.TempDir()}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := tier.PoolStats().Hits; got != hits {
		t.Errorf("a job with a read grant claimed a pooled sandbox (hits %d, was %d)", got, hits)
	}
}
