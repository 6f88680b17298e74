package tierset

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/testing/egresstest"
)

// TestStarlarkEgressWired: the registry's Starlark tier admits a net grant
// and sends the `http` module's request through a gateway: a granted name
// that resolves to loopback (no operator pin) is refused by the gateway,
// and the decision is in the result.
func TestStarlarkEgressWired(t *testing.T) {
	o := egresstest.StartOrigin(t)
	{
		tier, err := entry(t, "starlark").New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		job := airlock.Job{Kind: airlock.KindStarlark, Code: `r = http.get("http://localhost:` + o.Port + `/")`,
			Grants: airlock.Grants{Net: []airlock.NetRule{o.Rule("localhost")}}}
		res, err := tier.Run(context.Background(), job)
		var d *airlock.Denied
		if !errors.As(err, &d) || d.Capability != "net" {
			t.Fatalf("want denied net, got %v", err)
		}
		if len(res.Decision) == 0 || !strings.HasPrefix(res.Decision[0], "egress deny client GET localhost:") {
			t.Errorf("decisions: %q", res.Decision)
		}
		if o.Hits("GET") != 0 {
			t.Error("the loopback origin was reached")
		}
	}
}
