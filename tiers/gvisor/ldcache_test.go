package gvisor

import (
	"encoding/binary"
	"os"
	"path/filepath"
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

// The tier's root holds the host's cache only when it passes the check.
func TestWriteLdCache(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(root, "etc", "ld.so.cache")
	if err := os.WriteFile(dst, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	// No directory is mounted: nothing may be listed, and a stale copy goes.
	if err := writeLdCache(root, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Errorf("cache present with no mounted directories: %v", err)
	}
	host, err := os.ReadFile(hostLdCache)
	if err != nil || !ldCacheWithin(host, NewConfig().hostDirs) {
		t.Logf("host cache absent or not within the default directories (%v): nothing more to check", err)
		return
	}
	if err := writeLdCache(root, NewConfig().hostDirs); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(dst); err != nil || string(got) != string(host) {
		t.Errorf("cache not copied: %v", err)
	}
}
