package microvm

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// cpioWriter writes the "newc" archive format the kernel unpacks as an
// initramfs.
type cpioWriter struct {
	w   *bufio.Writer
	ino uint32
	err error
}

func newCPIO(w io.Writer) *cpioWriter { return &cpioWriter{w: bufio.NewWriterSize(w, 1<<16), ino: 1} }

const (
	cpioDir     = 0o040000
	cpioFile    = 0o100000
	cpioSymlink = 0o120000
	cpioChar    = 0o020000
)

type cpioEntry struct {
	name         string
	mode         uint32 // type and permission bits
	uid, gid     uint32
	data         []byte // file contents or symlink target
	rmaj, rminor uint32
}

func (c *cpioWriter) add(e cpioEntry) {
	if c.err != nil {
		return
	}
	name := strings.TrimPrefix(e.name, "/")
	c.ino++
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, e.mode, e.uid, e.gid, 1, 0, len(e.data), 0, 0, e.rmaj, e.rminor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write([]byte(name + "\x00"))
	c.pad(len(hdr) + len(name) + 1)
	c.write(e.data)
	c.pad(len(e.data))
}

func (c *cpioWriter) write(b []byte) {
	if c.err == nil {
		_, c.err = c.w.Write(b)
	}
}

func (c *cpioWriter) pad(n int) {
	if r := n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// close writes the trailer and flushes.
func (c *cpioWriter) close() error {
	c.add(cpioEntry{name: "TRAILER!!!"})
	if c.err != nil {
		return c.err
	}
	return c.w.Flush()
}
