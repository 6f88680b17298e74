package tierset

import (
	"context"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

func TestStarlarkBuilt(t *testing.T) {
	{
		tier, err := entry(t, "starlark").New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindStarlark, Code: "result = sum([i*i for i in range(4)])"})
		if err != nil || res.Value != int64(14) {
			t.Fatalf("got %v, %v; want 14", res.Value, err)
		}
	}
}
