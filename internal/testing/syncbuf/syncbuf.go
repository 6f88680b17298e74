// Package syncbuf is test support: a buffer one goroutine writes (a
// command's output, a server's log) while another reads it.
package syncbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer safe for a writer and readers at once. The
// zero value is ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what has been written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Lines returns what has been written so far as lines, without the last
// line's end.
func (s *Buffer) Lines() []string {
	return strings.Split(strings.TrimSpace(s.String()), "\n")
}
