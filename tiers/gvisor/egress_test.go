package gvisor

import (
	"context"
	"testing"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/testing/egresstest"
)

// TestEgress: from inside gVisor — cold (a sandbox made for the job, the
// agent as its first process) and pooled — curl through the granted
// policy reaches an allowed loopback origin with GET and is refused with
// PUT; a disallowed name does not resolve and is logged; curl bypassing
// the proxy has no route.
func TestEgress(t *testing.T) {
	egresstest.NeedTools(t, "curl", "nslookup", "getent")
	for _, pooled := range []bool{false, true} {
		name := "cold"
		if pooled {
			name = "pooled"
		}
		t.Run(name, func(t *testing.T) {
			o := egresstest.StartOrigin(t, "origin.test")
			rec := &egresstest.Recorder{}
			cfg := NewConfig().WithEgress(egress.Config{Hosts: o.Pins, Log: rec.Add})
			if pooled {
				cfg = cfg.WithPool(1, 1)
			}
			tier := newTier(t, cfg)
			if pooled {
				warm(t, tier)
			}
			res, err := tier.Run(context.Background(), egresstest.ShellJob(o.GrantedScript(), o.Rule("origin.test")))
			if err != nil {
				t.Fatalf("%v\n%s\n%s", err, res.Stdout, res.Stderr)
			}
			o.CheckGranted(t, res, rec)
		})
	}
}

// TestEgressNoGrant: without a net grant there is no gateway socket, no
// forwarder and no variables, and nothing is reachable.
func TestEgressNoGrant(t *testing.T) {
	egresstest.NeedTools(t, "curl")
	o := egresstest.StartOrigin(t, "origin.test")
	rec := &egresstest.Recorder{}
	tier := newTier(t, NewConfig().WithEgress(egress.Config{Hosts: o.Pins, Log: rec.Add}).WithPool(1, 1))
	warm(t, tier)
	res, err := tier.Run(context.Background(), cmdJob("sh", "-c", o.UngrantedScript(sandboxEgressDir)))
	if err != nil {
		t.Fatal(err)
	}
	o.CheckUngranted(t, res)
	if rec.Len() != 0 {
		t.Errorf("a job without a grant got a gateway (%d decisions)", rec.Len())
	}
}

// TestEgressPoolBindsAtClaim: a pooled sandbox, created before any job,
// enforces the rules of the job that claims it.
func TestEgressPoolBindsAtClaim(t *testing.T) {
	egresstest.NeedTools(t, "curl")
	o := egresstest.StartOrigin(t, "a.test", "b.test")
	tier := newTier(t, NewConfig().WithEgress(egress.Config{Hosts: o.Pins}).WithPool(1, 1))
	for _, j := range []struct{ allowed, refused string }{{"a.test", "b.test"}, {"b.test", "a.test"}} {
		warm(t, tier)
		hits := tier.Stats().Hits
		res, err := tier.Run(context.Background(), egresstest.ShellJob(o.PoolScript(j.allowed, j.refused), o.Rule(j.allowed)))
		if err != nil {
			t.Fatal(err)
		}
		if tier.Stats().Hits != hits+1 {
			t.Fatal("the job did not run in a pooled sandbox")
		}
		egresstest.CheckPool(t, res, j.allowed)
	}
}

// TestEgressHTTPS: HTTPS through the proxy with the CA the tier placed:
// the gateway terminates TLS, checks the method inside the tunnel (GET
// 200, DELETE 403) and verifies the origin with the operator's roots.
func TestEgressHTTPS(t *testing.T) {
	egresstest.NeedTools(t, "curl")
	o := egresstest.StartTLSOrigin(t)
	tier := newTier(t, NewConfig().WithEgress(egress.Config{Hosts: o.Pins, OriginRoots: o.Roots}))
	res, err := tier.Run(context.Background(), egresstest.ShellJob(o.Script(), o.Rule()))
	if err != nil {
		t.Fatal(err)
	}
	o.Check(t, res)
}
