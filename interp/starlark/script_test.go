package starlark_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// TestScripts runs the data-driven chunks in testdata/*.star (format in
// the header of testdata/semantics.star).
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.star")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata scripts: %v", err)
	}
	tier := newTier(t)
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, chunk := range strings.Split(string(data), "\n---\n") {
			want := ""
			for _, line := range strings.Split(chunk, "\n") {
				if _, w, ok := strings.Cut(line, "### "); ok {
					want = strings.TrimSpace(w)
				}
			}
			line := strings.Count(strings.Join(strings.Split(string(data), "\n---\n")[:i], "\n---\n"), "\n") + 1
			t.Run(filepath.Base(file)+":"+strconv.Itoa(line), func(t *testing.T) {
				res, err := tier.Run(context.Background(), airlock.Job{Kind: airlock.KindStarlark, Code: chunk})
				switch {
				case want == "" && err != nil:
					t.Fatalf("unexpected error: %v\nstdout: %s", err, res.Stdout)
				case want != "" && err == nil:
					t.Fatalf("want an error matching %q, got none", want)
				case want != "" && !regexp.MustCompile(want).MatchString(err.Error()):
					t.Fatalf("error %q does not match %q", err, want)
				}
			})
		}
	}
}
