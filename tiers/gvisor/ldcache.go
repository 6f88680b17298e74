package gvisor

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
)

// The dynamic loader looks a program's libraries up in /etc/ld.so.cache.
// Without one it searches every hardware-capability subdirectory of the
// system library directories, and under gVisor each of those failed opens
// and stats is a system call through the Sentry: for /bin/true, 38 of its
// 61 system calls. So the sandbox root gets a copy of the host's cache,
// but only when every library it names lies in a directory the sandbox
// mounts anyway (the cache then reveals nothing the sandbox cannot list);
// otherwise the root has none and the loader searches, as before.
const (
	hostLdCache    = "/etc/ld.so.cache"
	maxLdCache     = 8 << 20
	ldCacheMagic   = "glibc-ld.so.cache1.1"
	ldCacheHeader  = 48 // struct cache_file_new
	ldCacheEntry   = 24 // struct file_entry_new
	ldCacheMaxLibs = 1 << 16
)

// ldCache returns the host's loader cache for the root's /etc, if it is
// acceptable: the copy described at the top of this file.
func ldCache(hostDirs []string) (string, bool) {
	data, err := os.ReadFile(hostLdCache)
	if err != nil || len(data) > maxLdCache || !ldCacheWithin(data, hostDirs) {
		return "", false
	}
	return string(data), true
}

// ldCacheWithin reports whether data is a loader cache in glibc's current
// format whose every library path is absolute, clean and under one of
// dirs. Anything it does not understand is refused.
func ldCacheWithin(data []byte, dirs []string) bool {
	if len(data) < ldCacheHeader || string(data[:len(ldCacheMagic)]) != ldCacheMagic {
		return false
	}
	n := binary.LittleEndian.Uint32(data[20:])
	if n == 0 || n > ldCacheMaxLibs || ldCacheHeader+int(n)*ldCacheEntry > len(data) {
		return false
	}
	str := func(off uint32) (string, bool) {
		if int64(off) >= int64(len(data)) {
			return "", false
		}
		end := bytes.IndexByte(data[off:], 0)
		if end < 0 {
			return "", false
		}
		return string(data[off : int(off)+end]), true
	}
	for i := range int(n) {
		e := data[ldCacheHeader+i*ldCacheEntry:]
		key, ok1 := str(binary.LittleEndian.Uint32(e[4:]))
		path, ok2 := str(binary.LittleEndian.Uint32(e[8:]))
		if !ok1 || !ok2 || key == "" || strings.Contains(key, "/") || !underAny(path, dirs) {
			return false
		}
	}
	return true
}

func underAny(path string, dirs []string) bool {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return false
	}
	for _, d := range dirs {
		if strings.HasPrefix(path, filepath.Clean(d)+"/") {
			return true
		}
	}
	return false
}
