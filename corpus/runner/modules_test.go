package runner_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/corpus/runner"
	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
)

// A source tree another user made is not one to build modules from: its
// programs would be built, with its tools, by whoever runs the corpus.
func TestFindSourceTrusted(t *testing.T) {
	tree := func(dir string) {
		for _, d := range []string{"corpus/wasm", "wasm/testdata/guest"} {
			if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	mine := t.TempDir()
	tree(mine)
	t.Chdir(mine)
	if got := runner.FindSource(); got != mine {
		t.Fatalf("this user's tree: FindSource() = %q, want %s", got, mine)
	}
	theirs := testenv.ForeignDir(t)
	tree(theirs)
	t.Chdir(theirs)
	if got := runner.FindSource(); got == theirs {
		t.Errorf("another user's tree was found")
	}
}
