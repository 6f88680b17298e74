package value_test

import (
	"testing"

	"github.com/airlock-sandbox/airlock/internal/value"
)

func TestCheckPathPattern(t *testing.T) {
	for _, ok := range []string{"/info/refs", "/org/repo/*", "*/git-upload-pack", "/", "/a-b_c.d~e"} {
		if err := value.CheckPathPattern(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "info/refs", "*", "/a/*/b", "**/x", "/a?b", "/a#b", "/a%2fb", "/a;b", `/a\b`, "/a b", "/a//b", "/a/../b", "/./a", "/ä"} {
		if err := value.CheckPathPattern(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
