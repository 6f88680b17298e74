package gvisor

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// buildLdCache makes a cache in glibc's current format naming libs
// (soname -> path).
func buildLdCache(libs [][2]string) []byte {
	hdr := make([]byte, ldCacheHeader)
	copy(hdr, ldCacheMagic)
	binary.LittleEndian.PutUint32(hdr[20:], uint32(len(libs)))
	entries := make([]byte, len(libs)*ldCacheEntry)
	var strs []byte
	base := uint32(len(hdr) + len(entries))
	for i, l := range libs {
		e := entries[i*ldCacheEntry:]
		binary.LittleEndian.PutUint32(e[4:], base+uint32(len(strs)))
		strs = append(append(strs, l[0]...), 0)
		binary.LittleEndian.PutUint32(e[8:], base+uint32(len(strs)))
		strs = append(append(strs, l[1]...), 0)
	}
	binary.LittleEndian.PutUint32(hdr[24:], uint32(len(strs)))
	return append(append(hdr, entries...), strs...)
}

func TestLdCacheWithin(t *testing.T) {
	dirs := []string{"/lib", "/usr"}
	good := buildLdCache([][2]string{{"libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"}, {"libz.so.1", "/usr/lib/libz.so.1"}})
	if !ldCacheWithin(good, dirs) {
		t.Error("a cache of mounted libraries was refused")
	}
	outside := buildLdCache([][2]string{{"libc.so.6", "/lib/libc.so.6"}, {"libv.so.1", "/opt/vendor/lib/libv.so.1"}})
	dotdot := buildLdCache([][2]string{{"libc.so.6", "/lib/../opt/libc.so.6"}})
	prefix := buildLdCache([][2]string{{"libc.so.6", "/usrx/libc.so.6"}})
	badMagic := append([]byte(nil), good...)
	badMagic[0] = 'x'
	badOffset := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(badOffset[ldCacheHeader+8:], uint32(len(good)+10))
	unterminated := good[:len(good)-1]
	tooMany := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(tooMany[20:], 1000)
	for name, data := range map[string][]byte{
		"outside": outside, "dotdot": dotdot, "prefix": prefix, "magic": badMagic,
		"offset": badOffset, "unterminated": unterminated, "count": tooMany,
		"empty": buildLdCache(nil), "short": good[:10],
	} {
		if ldCacheWithin(data, dirs) {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The root holds the host's cache only when it passes the check, and the
// root's digest follows the cache's content.
func TestRootLdCache(t *testing.T) {
	has := func(entries []rootEntry) (string, bool) {
		for _, e := range entries {
			if e.path == "etc/ld.so.cache" {
				return e.data, true
			}
		}
		return "", false
	}
	// No directory is mounted: nothing may be listed.
	none, _, err := rootPlan(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := has(none); ok {
		t.Error("cache planned with no mounted directories")
	}
	host, err := os.ReadFile(hostLdCache)
	if err != nil || !ldCacheWithin(host, NewConfig().hostDirs) {
		t.Logf("host cache absent or not within the default directories (%v): nothing more to check", err)
		return
	}
	entries, _, err := rootPlan(NewConfig().hostDirs)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := has(entries); !ok || got != string(host) {
		t.Error("cache not planned for the default directories")
	}
	root := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(root, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := buildRoot(root, entries); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(root, "etc", "ld.so.cache")); err != nil || string(got) != string(host) {
		t.Errorf("cache not copied: %v", err)
	}
	changed := slices.Clone(entries)
	for i := range changed {
		if changed[i].path == "etc/ld.so.cache" {
			changed[i].data += "x"
		}
	}
	if rootDigest(changed) == rootDigest(entries) {
		t.Error("a different cache gives the same root digest")
	}
}
