package wasm

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// TestCollect: a wasm job's collect reads its in-memory scratch back once
// the guest has ended: the job's own binary files as they are, a file the
// guest created, and a note for a pattern that matched nothing; a job
// with collect and no files still gets a scratch to write in.
func TestCollect(t *testing.T) {
	tier := newTier(t, NewConfig())
	bin := make([]byte, 256)
	for i := range bin {
		bin[i] = byte(i)
	}
	run := func(files map[string]string) airlock.Result {
		t.Helper()
		res, err := tier.Run(context.Background(), airlock.Job{
			Kind:    airlock.KindWasm,
			Module:  watFile(t, filepath.Join("testdata", "wasiprobe.wat")),
			Entry:   "open",
			Argv:    []string{"1"}, // O_CREAT
			Stdin:   "made.txt",
			Files:   files,
			Collect: []string{"keep/*", "made.txt", "none"},
		})
		if err != nil || res.Value != int64(wasiESUCCESS) {
			t.Fatalf("%v, value %v", err, res.Value)
		}
		return res
	}
	res := run(map[string]string{"keep/a.bin": string(bin), "keep/b.txt": "t"})
	if len(res.Files) != 3 || res.Files["keep/a.bin"] != string(bin) || res.Files["keep/b.txt"] != "t" {
		t.Errorf("collected %q", res.Files)
	}
	if v, ok := res.Files["made.txt"]; !ok || v != "" {
		t.Errorf("the guest's file: %q %v", v, ok)
	}
	if !slices.Equal(res.FilesSkipped, []string{"none: matched nothing"}) {
		t.Errorf("skipped %q", res.FilesSkipped)
	}
	res = run(nil)
	if _, ok := res.Files["made.txt"]; !ok || !strings.HasPrefix(res.FilesSkipped[0], "keep/*") {
		t.Errorf("without files: %q %q", res.Files, res.FilesSkipped)
	}
}
