package tierset

import (
	"context"
	"errors"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// A tier that cannot be built must not take the others down with it.
func TestBuildSurvivesABrokenTier(t *testing.T) {
	entries := append(Entries()[:1], Entry{Name: "test-broken", Level: airlock.LevelContainer, New: func(Options) (airlock.Tier, error) {
		return nil, errors.New("no permission for its state directory")
	}})
	tiers := BuildFrom(entries, Options{})
	defer Close(tiers)
	var found, expr bool
	for _, tier := range tiers {
		switch tier.Name() {
		case "expr":
			expr = true
		case "test-broken":
			found = true
			if tier.Level() != airlock.LevelContainer {
				t.Errorf("level %v, want container", tier.Level())
			}
			if err := tier.(airlock.Prober).Available(); err == nil {
				t.Error("a broken tier reports itself available")
			}
			job := airlock.Job{Kind: airlock.KindCommand, Argv: []string{"true"}}
			var na *airlock.NotAdmitted
			if err := tier.Admit(job); !errors.As(err, &na) {
				t.Errorf("Admit: %v, want *NotAdmitted", err)
			}
			if _, err := tier.Run(context.Background(), job); !errors.As(err, &na) {
				t.Errorf("Run: %v, want *NotAdmitted", err)
			}
		}
	}
	if !found || !expr {
		t.Fatalf("broken stand-in present: %v, expr present: %v", found, expr)
	}
}
