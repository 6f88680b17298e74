package account

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/interp/starlark"
)

// BenchmarkAccountHop measures what the account hop adds to a job: the
// same job on the inner tier directly and through the account tier to an
// executor over that inner tier on a peer-checked Unix socket, alternated
// in one run. The inner tier is Starlark, so that what is measured is the
// hop (encoding, the socket, the executor's server and its resolving and
// scrubbing), not a sandbox's start. It reports each side's median, the
// median overhead and the ratio.
func BenchmarkAccountHop(b *testing.B) {
	inner, err := starlark.New(starlark.NewConfig())
	if err != nil {
		b.Fatal(err)
	}
	sock := executorOn(b, inner, "")
	acct := New(NewConfig("bench", sock, os.Getuid()))
	job := airlock.Job{Kind: airlock.KindStarlark, Code: "result = 1", Situation: airlock.SituationCredentials}
	ctx := context.Background()
	var direct, hop []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := inner.Run(ctx, job); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := acct.Run(ctx, job); err != nil {
			b.Fatal(err)
		}
		direct, hop = append(direct, t1.Sub(t0)), append(hop, time.Since(t1))
	}
	median := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	md, mh := median(direct), median(hop)
	b.ReportMetric(float64(md.Microseconds()), "direct-us")
	b.ReportMetric(float64(mh.Microseconds()), "account-us")
	b.ReportMetric(float64((mh - md).Microseconds()), "overhead-us")
	b.ReportMetric(float64(mh)/float64(md), "x-inner")
}
