package tierset

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/escalate"
)

// An unbuilt tier answers as the built one: name, level, cost,
// availability and, for every job of a matrix, admission.
func TestLazyMatchesBuilt(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir()) // the OS tiers' default directories
	jobs := []airlock.Job{}
	for _, k := range []airlock.Kind{airlock.KindExpr, airlock.KindStarlark, airlock.KindWasm, airlock.KindCommand} {
		jobs = append(jobs,
			airlock.Job{Kind: k},
			airlock.Job{Kind: k, Env: map[string]string{"A": "b"}},
			airlock.Job{Kind: k, Image: "python"},
			airlock.Job{Kind: k, Grants: airlock.Grants{Net: []airlock.NetRule{{Host: "example.com"}}}},
			airlock.Job{Kind: k, Grants: airlock.Grants{Spawn: true}},
			airlock.Job{Kind: k, Lifecycle: airlock.LifecycleSession},
		)
	}
	for _, e := range Entries() {
		t.Run(e.Name, func(t *testing.T) {
			built := BuildFrom([]Entry{e}, Options{})[0]
			defer Close([]airlock.Tier{built})
			lazyT := LazyFrom([]Entry{e}, Options{})[0]
			defer Close([]airlock.Tier{lazyT})
			c, ok := built.(interface{ Cost() time.Duration })
			if !ok {
				t.Fatalf("the built tier declares no cost")
			}
			if got := lazyT.(interface{ Cost() time.Duration }).Cost(); got != c.Cost() {
				t.Errorf("cost %v, the built tier's %v", got, c.Cost())
			}
			if lazyT.Name() != built.Name() || lazyT.Level() != built.Level() {
				t.Errorf("%s level %v, the built tier is %s level %v", lazyT.Name(), lazyT.Level(), built.Name(), built.Level())
			}
			var want error
			if p, ok := built.(airlock.Prober); ok {
				want = p.Available()
			}
			if got := lazyT.(airlock.Prober).Available(); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("probe says %v, the built tier %v", got, want)
			}
			if Built(lazyT) {
				t.Fatal("asking the name, cost and probe built the tier")
			}
			_, builtSessions := built.(airlock.SessionTier)
			if _, ok := lazyT.(airlock.SessionTier); ok != builtSessions {
				t.Errorf("session tier %v, the built one %v", ok, builtSessions)
			}
			if want != nil {
				return // the router never asks an unavailable tier to admit
			}
			for _, j := range jobs {
				w, g := built.Admit(j), lazyT.Admit(j)
				if fmt.Sprint(w) != fmt.Sprint(g) {
					t.Errorf("%s job %+v: admit %v, the built tier %v", e.Name, j, g, w)
				}
			}
		})
	}
}

// The router over the lazy set builds only the tier it picks: an
// expression builds the expression tier alone (no gVisor sweep, no
// process-tier probe of the sandbox directory), a command run on the
// process tier builds that one alone; Close closes what was built and
// builds nothing after.
func TestLazyBuildsOnlyThePickedTier(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	tiers, err := Lazy(Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := escalate.New(escalate.DefaultPolicy(), tiers)
	if err != nil {
		t.Fatal(err)
	}
	built := func() []string {
		var out []string
		for _, tier := range tiers {
			if Built(tier) {
				out = append(out, tier.Name())
			}
		}
		return out
	}
	res, err := r.Run(context.Background(), airlock.Job{Kind: airlock.KindExpr, Code: "1+2"})
	if err != nil || fmt.Sprint(res.Value) != "3" {
		t.Fatalf("%v %+v", err, res)
	}
	if b := built(); fmt.Sprint(b) != "[expr]" {
		t.Errorf("an expression built %v, want [expr]", b)
	}
	// gVisor's directory (under TMPDIR) is untouched: no sweep ran.
	if _, err := os.Stat(filepath.Join(tmp, "airlock-gvisor")); !os.IsNotExist(err) {
		t.Errorf("gVisor's directory exists after an expression (%v)", err)
	}
	if err := r.Unavailable("process"); err == nil {
		job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"}, Tier: "process", Situation: airlock.SituationInternal}
		if _, err := r.Run(context.Background(), job); err != nil {
			t.Fatal(err)
		}
		if b := built(); fmt.Sprint(b) != "[expr process]" {
			t.Errorf("after a process run built %v, want [expr process]", b)
		}
	}
	if err := Close(tiers); err != nil {
		t.Fatal(err)
	}
	res, err = r.Run(context.Background(), airlock.Job{Kind: airlock.KindStarlark, Code: "x = 1"})
	if err == nil {
		t.Fatalf("a tier was built after Close: %+v", res)
	}
	for _, tier := range tiers {
		if tier.Name() == "starlark" && Built(tier) && tier.Admit(airlock.Job{Kind: airlock.KindStarlark}) == nil {
			t.Error("the starlark tier was built after Close")
		}
	}
}

// Concurrent first runs build the tier once.
func TestLazyBuildsOnce(t *testing.T) {
	var mu sync.Mutex
	builds := 0
	e := entry(t, "expr")
	inner := e.New
	e.New = func(o Options) (airlock.Tier, error) {
		mu.Lock()
		builds++
		mu.Unlock()
		return inner(o)
	}
	tier := LazyFrom([]Entry{e}, Options{})[0]
	defer Close([]airlock.Tier{tier})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if res, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindExpr, Code: "2*3"}); err != nil || fmt.Sprint(res.Value) != "6" {
				t.Errorf("%v %+v", err, res)
			}
		})
	}
	wg.Wait()
	if builds != 1 {
		t.Errorf("built %d times, want once", builds)
	}
}
