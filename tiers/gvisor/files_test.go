package gvisor

import (
	"context"
	"slices"
	"testing"
)

func binary256() string {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return string(b)
}

// TestFilesInAndOut: a 256-byte binary file arrives as 256 bytes (cat
// returns it intact on stdout), and what the program wrote comes back
// through Collect, read by the agent inside the sandbox: regular files
// only, a planted link reported and not followed. Cold (an agent sandbox
// of its own) and pooled.
func TestFilesInAndOut(t *testing.T) {
	for name, cfg := range map[string]Config{"cold": NewConfig(), "pooled": NewConfig().WithPool(1, 1)} {
		t.Run(name, func(t *testing.T) {
			tier := newTier(t, cfg)
			if name == "pooled" {
				warm(t, tier)
			}
			job := cmdJob("sh", "-c", `cat in.bin; mkdir out; cp in.bin out/copy.bin; echo hi > out/b.txt; ln -s /etc/passwd out/leak.txt`)
			job.Files = map[string]string{"in.bin": binary256()}
			job.Collect = []string{"out/*.txt", "out/copy.bin", "none/*"}
			res, err := tier.Run(context.Background(), job)
			if err != nil {
				t.Fatalf("%v (stderr %q)", err, res.Stderr)
			}
			if res.Stdout != binary256() {
				t.Errorf("stdout is %d bytes %q, want the 256-byte file", len(res.Stdout), res.Stdout)
			}
			if len(res.Files) != 2 || res.Files["out/copy.bin"] != binary256() || res.Files["out/b.txt"] != "hi\n" {
				t.Errorf("collected %q", res.Files)
			}
			for _, want := range []string{"out/leak.txt: a symbolic link, not followed", "none/*: matched nothing"} {
				if !slices.Contains(res.FilesSkipped, want) {
					t.Errorf("skipped %q lacks %q", res.FilesSkipped, want)
				}
			}
			// A program that cannot start still has its scratch collected.
			missing := cmdJob("no-such-program")
			missing.Files, missing.Collect = map[string]string{"f.txt": "x"}, []string{"f.txt"}
			if res, err := tier.Run(context.Background(), missing); err != nil || res.ExitCode != 127 || res.Files["f.txt"] != "x" {
				t.Errorf("a missing program: %v, exit %d, files %q", err, res.ExitCode, res.Files)
			}
			// A job that collects nothing gets no files frame.
			res, err = tier.Run(context.Background(), cmdJob("sh", "-c", "echo x > f"))
			if err != nil || res.Files != nil || res.FilesSkipped != nil {
				t.Errorf("a job without collect: %v, %q %q", err, res.Files, res.FilesSkipped)
			}
		})
	}
}
