package setup

import (
	"context"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

func TestStarlarkRegistered(t *testing.T) {
	for _, f := range Factories() {
		if f.Name != "starlark" {
			continue
		}
		if f.Order != 20 {
			t.Errorf("starlark registered with order %d, want 20", f.Order)
		}
		tier, err := f.New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindStarlark, Code: "result = sum([i*i for i in range(4)])"})
		if err != nil || res.Value != int64(14) {
			t.Fatalf("got %v, %v; want 14", res.Value, err)
		}
		return
	}
	t.Fatal("starlark tier is not registered")
}
