package tierset

import (
	"testing"

	"github.com/airlock-sandbox/airlock"
)

func TestMicroVMBuilt(t *testing.T) {
	f := entry(t, "microvm")
	tier, err := f.New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tier.Name() != "microvm" || tier.Level() != airlock.LevelVirtualisation {
		t.Fatalf("built %s at level %v", tier.Name(), tier.Level())
	}
	if _, err := f.New(Options{MicroVMPool: -1}); err == nil {
		t.Fatal("a negative pool size was accepted")
	}
	if _, err := f.New(Options{MicroVMWarm: "tepid"}); err == nil {
		t.Fatal("an unknown warm mode was accepted")
	}
}
