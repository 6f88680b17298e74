package microvm

import (
	"context"
	"slices"
	"testing"
)

// TestFilesInAndOut: a 256-byte binary file arrives as 256 bytes (cat
// returns it intact on stdout), and what the program wrote comes back
// through Collect, read by the guest agent once the job has ended: a
// planted link is reported and not followed.
func TestFilesInAndOut(t *testing.T) {
	tier := shared.get(t, WarmCold)
	bin := make([]byte, 256)
	for i := range bin {
		bin[i] = byte(i)
	}
	job := command("sh", "-c", `cat in.bin; mkdir out; cp in.bin out/copy.bin; echo hi > out/b.txt; ln -s /etc/passwd out/leak.txt`)
	job.Files = map[string]string{"in.bin": string(bin)}
	job.Grants.Spawn = true // sh starts cat, mkdir, cp and ln
	job.Collect = []string{"out/*.txt", "out/copy.bin"}
	res, err := tier.Run(context.Background(), job)
	if err != nil {
		t.Fatalf("%v (stderr %q)", err, res.Stderr)
	}
	if res.Stdout != string(bin) {
		t.Errorf("stdout is %d bytes %q, want the 256-byte file", len(res.Stdout), res.Stdout)
	}
	if len(res.Files) != 2 || res.Files["out/copy.bin"] != string(bin) || res.Files["out/b.txt"] != "hi\n" {
		t.Errorf("collected %q", res.Files)
	}
	if !slices.Contains(res.FilesSkipped, "out/leak.txt: a symbolic link, not followed") {
		t.Errorf("skipped %q lacks the link", res.FilesSkipped)
	}
	assertNoVMs(t, tier)
}
