package airlock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

func TestPlacedCheck(t *testing.T) {
	ctx := context.Background()
	if airlock.HasPlacedCheck(ctx) || airlock.CheckPlaced(ctx, "dir") != nil {
		t.Fatal("a context without a check reported one")
	}
	if airlock.HasPlacedCheck(airlock.WithPlacedCheck(ctx, nil)) {
		t.Fatal("a nil check counted as a check")
	}
	var seen string
	refuse := errors.New("digest mismatch")
	ctx = airlock.WithPlacedCheck(ctx, func(dir string) error { seen = dir; return refuse })
	if !airlock.HasPlacedCheck(ctx) {
		t.Fatal("the check was not found")
	}
	if err := airlock.CheckPlaced(ctx, "scratch"); !errors.Is(err, refuse) || seen != "scratch" {
		t.Fatalf("CheckPlaced = %v on %q; want the check's refusal on scratch", err, seen)
	}
}
