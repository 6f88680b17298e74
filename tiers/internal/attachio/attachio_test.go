package attachio

import (
	"io"
	"strings"
	"testing"
)

// TestTail: the writer never blocks, the oldest unread bytes go first,
// and the reader gets what is left, then EOF.
func TestTail(t *testing.T) {
	tl := NewTail(8)
	for _, s := range []string{"0123", "4567", "89ab"} {
		if n, err := tl.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("write %q: %d, %v", s, n, err)
		}
	}
	tl.Close()
	got, err := io.ReadAll(tl)
	if err != nil || string(got) != "456789ab" {
		t.Errorf("read %q, %v", got, err)
	}
	if n, _ := tl.Write([]byte("late")); n != 4 {
		t.Error("a write after Close failed")
	}
	tl = NewTail(1 << 10)
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(tl)
		done <- string(b)
	}()
	_, _ = tl.Write([]byte(strings.Repeat("x", 10)))
	tl.Close()
	if s := <-done; s != strings.Repeat("x", 10) {
		t.Errorf("a blocked reader got %q", s)
	}
}
