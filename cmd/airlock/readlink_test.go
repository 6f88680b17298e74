package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testing/tiertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// linkedGrant makes, outside /tmp (where a sandbox has its own mounts),
// a directory holding f.txt and a symbolic link to it, and returns the
// link and the base holding both.
func linkedGrant(t *testing.T) (link, base string) {
	t.Helper()
	base, err := os.MkdirTemp("/var/tmp", "airlock-link-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	require.NoError(t, os.Chmod(base, 0o755))
	data := filepath.Join(base, "data")
	require.NoError(t, os.Mkdir(data, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(data, "f.txt"), []byte("through the link\n"), 0o644))
	link = filepath.Join(base, "link")
	require.NoError(t, os.Symlink("data", link))
	return link, base
}

// TestReadGrantThroughLink: a read grant named through a symbolic link is
// found at the path the user typed, on every tier that takes read grants
// (the wasm tier's own test is wasm's TestGrantThroughLink); a link that
// leads outside the allowed root is still refused.
func TestReadGrantThroughLink(t *testing.T) {
	needProcess(t)
	link, base := linkedGrant(t)
	for _, tier := range []string{"seccomp", "process", "gvisor", "microvm"} {
		t.Run(tier, func(t *testing.T) {
			args := []string{"run", "--tier", tier, "--allow-read", link}
			if tier == "seccomp" {
				args = append(args, "--situation", "expression") // the only one its level meets
			}
			out, errOut, code := run(t, "", append(args, "--", "cat", link+"/f.txt")...)
			if code == exitMissing {
				tiertest.Unavailable(t, tier, errors.New(strings.TrimSpace(errOut)))
			}
			assert.Equal(t, exitOK, code, errOut)
			assert.Equal(t, "through the link\n", out)
			// The link's target is where it was mounted before: a program
			// given the link's path now finds it.
		})
	}
	// The operator's root is the link; a job file's grant through a link
	// inside it to a path outside it is refused, on its real path.
	require.NoError(t, os.Symlink("/etc", filepath.Join(base, "data", "escape")))
	job := `{"kind":"command","situation":"internal","argv":["cat","` + link + `/escape/passwd"],"grants":{"fs":{"read":["` + link + `/escape"]}}}`
	out, _, code := run(t, job, "run", "--json", "--allow-read", link, "-")
	assert.Equal(t, exitDenied, code, out)
	assert.Contains(t, out, "outside the read roots")
	assert.NotContains(t, out, "root:x:0:0")
	// One inside the root, named through the link, is found where named.
	job = `{"kind":"command","situation":"internal","tier":"process","argv":["cat","` + link + `/f.txt"],"grants":{"fs":{"read":["` + link + `/f.txt"]}}}`
	out, _, code = run(t, job, "run", "--json", "--allow-read", link, "-")
	assert.Equal(t, exitOK, code, out)
	assert.Contains(t, out, `"stdout": "through the link\n"`)
}
