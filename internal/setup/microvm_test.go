package setup

import (
	"testing"

	"github.com/airlock-sandbox/airlock"
)

func TestMicroVMRegistered(t *testing.T) {
	for _, f := range Factories() {
		if f.Name != "microvm" {
			continue
		}
		if f.Order != 70 {
			t.Fatalf("order %d, want 70", f.Order)
		}
		tier, err := f.New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		if tier.Name() != "microvm" || tier.Level() != airlock.LevelVirtualisation {
			t.Fatalf("built %s at level %v", tier.Name(), tier.Level())
		}
		t.Setenv("AIRLOCK_MICROVM_POOL", "many")
		if _, err := f.New(Options{}); err == nil {
			t.Fatal("a malformed AIRLOCK_MICROVM_POOL was accepted")
		}
		return
	}
	t.Fatal("the microvm tier is not registered")
}
