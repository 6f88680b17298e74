package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/airlock-sandbox/airlock"
)

// TestFilesInAndOut: --file places a binary file byte for byte, the
// program's binary stdout reaches ours raw, and --collect with --out
// writes what the program wrote under DIR; a link the program planted is
// reported, not followed.
func TestFilesInAndOut(t *testing.T) {
	needProcess(t)
	dir := t.TempDir()
	bin := make([]byte, 256)
	for i := range bin {
		bin[i] = byte(i)
	}
	in := filepath.Join(dir, "in.bin")
	require.NoError(t, os.WriteFile(in, bin, 0o644))
	out := filepath.Join(dir, "out")
	stdout, errOut, code := run(t, "", "run", "--tier", "process", "--allow-spawn", "--file", in+":data/in.bin", "--collect", "res/*", "--collect", "top.txt", "--out", out,
		"--", "sh", "-c", "cat data/in.bin; mkdir res; cp data/in.bin res/copy.bin; echo top > top.txt; ln -s /etc/passwd res/link")
	require.Equal(t, exitOK, code, errOut)
	assert.Equal(t, string(bin), stdout, "binary stdout intact")
	got, err := os.ReadFile(filepath.Join(out, "res/copy.bin"))
	require.NoError(t, err)
	assert.Equal(t, bin, got)
	got, err = os.ReadFile(filepath.Join(out, "top.txt"))
	require.NoError(t, err)
	assert.Equal(t, "top\n", string(got))
	assert.Contains(t, errOut, "not collected: res/link: a symbolic link, not followed")
	_, err = os.Lstat(filepath.Join(out, "res/link"))
	assert.True(t, os.IsNotExist(err), "the link was written: %v", err)

	// --json returns the files in the Result, binary as base64.
	stdout, errOut, code = run(t, `{"kind":"command","argv":["sh","-c","printf '\\377\\000' > o.bin"],"collect":["o.bin"]}`, "run", "--json", "--tier", "process", "-")
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, stdout, `"base64": "/wA="`)
	var res airlock.Result
	require.NoError(t, json.Unmarshal([]byte(stdout), &res))
	assert.Equal(t, "\xff\x00", res.Files["o.bin"])

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--collect", "x", "--", "true"}, "need --out"},
		{[]string{"--out", out, "--", "true"}, "--collect"},
		{[]string{"--collect", "../x", "--out", out, "--", "true"}, "collect"},
	} {
		_, errOut, code := run(t, "", append([]string{"run", "--tier", "process"}, c.args...)...)
		assert.Equal(t, exitUsage, code, "%v: %s", c.args, errOut)
		assert.Contains(t, errOut, c.want)
		assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
	}
}

// TestOutNeverFollowsLinks: a name that would leave DIR is refused, and a
// link already in DIR where a file or directory goes is not written
// through.
func TestOutNeverFollowsLinks(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	require.NoError(t, os.WriteFile(victim, []byte("keep"), 0o644))
	elsewhere := t.TempDir()
	require.NoError(t, os.Symlink(victim, filepath.Join(dir, "f.txt")))
	require.NoError(t, os.Symlink(elsewhere, filepath.Join(dir, "sub")))
	o := outFlags{out: dir}
	err := o.write(&airlock.Result{Files: map[string]string{
		"f.txt": "evil", "sub/g.txt": "evil", "../up.txt": "evil", "/abs": "evil", "ok/fine.txt": "fine",
	}}, nil)
	require.Error(t, err)
	for _, name := range []string{"f.txt", "sub/g.txt", "../up.txt", "/abs"} {
		assert.Contains(t, err.Error(), name+": ")
	}
	data, _ := os.ReadFile(victim)
	assert.Equal(t, "keep", string(data), "written through a link")
	entries, _ := os.ReadDir(elsewhere)
	assert.Empty(t, entries, "written through a linked directory")
	_, err = os.Stat(filepath.Join(filepath.Dir(dir), "up.txt"))
	assert.True(t, os.IsNotExist(err))
	data, err = os.ReadFile(filepath.Join(dir, "ok/fine.txt"))
	require.NoError(t, err)
	assert.Equal(t, "fine", string(data))
}

// --out never changes a file outside DIR through a hard link in DIR: the
// file in its place shares its bytes with the one outside.
func TestOutRefusesHardLinks(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(dir, "outside.txt")
	require.NoError(t, os.WriteFile(outside, []byte("keep"), 0o644))
	out := filepath.Join(dir, "out")
	require.NoError(t, os.Mkdir(out, 0o755))
	require.NoError(t, os.Link(outside, filepath.Join(out, "res.txt")))
	o := outFlags{out: out}
	err := o.write(&airlock.Result{Files: map[string]string{"res.txt": "overwritten", "new.txt": "new"}}, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "hard links")
	assert.NotContains(t, err.Error(), "\n", "one line")
	got, _ := os.ReadFile(outside)
	assert.Equal(t, "keep", string(got), "the file outside DIR changed")
	got, _ = os.ReadFile(filepath.Join(out, "new.txt"))
	assert.Equal(t, "new", string(got), "the other file was not written")
}
