package tierset

import (
	"context"
	"testing"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/wasm"
)

func TestWasmBuilt(t *testing.T) {
	t.Setenv(wasm.CacheDirEnv, t.TempDir())
	{
		tier, err := entry(t, wasm.Name).New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer tier.(*wasm.Tier).Close()
		// (module (func (export "_start"))): the smallest command module.
		mod := []byte("\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00\x03\x02\x01\x00\x07\x0a\x01\x06_start\x00\x00\x0a\x04\x01\x02\x00\x0b")
		res, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindWasm, Module: mod})
		if err != nil || res.Tier != wasm.Name {
			t.Fatalf("%v %+v", err, res)
		}
	}
}
