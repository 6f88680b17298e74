// Package cpio writes the "newc" archive format the Linux kernel unpacks
// as an initramfs: enough for the guest roots the project builds (files,
// directories, symlinks and device nodes, all held in memory).
package cpio

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Mode type bits.
const (
	Dir     = 0o040000
	File    = 0o100000
	Symlink = 0o120000
	Char    = 0o020000
)

// Entry is one archive member.
type Entry struct {
	Name           string // a leading "/" is dropped
	Mode           uint32 // type and permission bits
	UID, GID       uint32
	Data           []byte // file contents or symlink target
	RMajor, RMinor uint32 // a device node's numbers
}

// Writer writes entries in order; the first error sticks and is returned
// by Close.
type Writer struct {
	w   *bufio.Writer
	ino uint32
	err error
}

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriterSize(w, 1<<16), ino: 1} }

// Add writes one entry.
func (c *Writer) Add(e Entry) {
	if c.err != nil {
		return
	}
	name := strings.TrimPrefix(e.Name, "/")
	c.ino++
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, e.Mode, e.UID, e.GID, 1, 0, len(e.Data), 0, 0, e.RMajor, e.RMinor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write([]byte(name + "\x00"))
	c.pad(len(hdr) + len(name) + 1)
	c.write(e.Data)
	c.pad(len(e.Data))
}

func (c *Writer) write(b []byte) {
	if c.err == nil {
		_, c.err = c.w.Write(b)
	}
}

func (c *Writer) pad(n int) {
	if r := n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// Close writes the trailer and flushes; it does not close the underlying
// writer.
func (c *Writer) Close() error {
	c.Add(Entry{Name: "TRAILER!!!"})
	if c.err != nil {
		return c.err
	}
	return c.w.Flush()
}
