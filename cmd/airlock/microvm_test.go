package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestMicroVMCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"microvm", "bogus"}, nil, &out, &errb); code != exitUsage {
		t.Fatalf("bad argument: exit %d", code)
	}
	out.Reset()
	code := Run(context.Background(), []string{"microvm", "status"}, nil, &out, &errb)
	switch code {
	case exitOK:
		if !strings.Contains(out.String(), "guest kernel: ") || !strings.Contains(out.String(), "accelerator: ") ||
			!strings.Contains(out.String(), "QEMU runs as: ") || !strings.Contains(out.String(), "QEMU namespaces: ") {
			t.Fatalf("status output %q", out.String())
		}
	case exitNotAdmitted:
		if !strings.Contains(out.String(), "unavailable") {
			t.Fatalf("status output %q", out.String())
		}
	default:
		t.Fatalf("exit %d: %s", code, errb.String())
	}
}
