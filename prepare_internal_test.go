package airlock

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/value"
)

func TestTruncMicroMatchesTruncate(t *testing.T) {
	for _, now := range []time.Time{
		time.Now(),
		time.Unix(0, 999_999_999).In(time.FixedZone("x", 3600)),
		time.Unix(-1, 1_234_567),
		time.Date(1, 1, 1, 0, 0, 0, 1999, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
	} {
		want := now.UTC().Truncate(time.Microsecond)
		if got := truncMicro(now); !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("truncMicro(%v) = %v, want %v", now, got, want)
		}
	}
}

// The fast paths of Resolve and validation must agree with the general
// ones they skip.
func TestPrepareFastPaths(t *testing.T) {
	p := LimitPolicy{Default: Limits{MemoryMB: 5}, Max: defaultLimitPolicy.Max}
	got, err := p.Resolve(Limits{})
	if err != nil || got.WallMS != defaultLimitPolicy.Default.WallMS || got.MemoryMB != 5 {
		t.Fatalf("Resolve(zero) = %+v, %v", got, err)
	}
	job := Job{Kind: KindExpr, Code: "x", Grants: Grants{FS: FSGrant{ScratchMB: -1}}}
	if err := job.Validate(); err == nil {
		t.Fatal("negative scratch_mb accepted")
	}
	for _, mb := range []int64{maxScratchMB + 1, 1 << 44, 1<<63 - 1} {
		job.Grants.FS.ScratchMB = mb
		if err := job.Validate(); err == nil || !strings.Contains(err.Error(), "scratch_mb") {
			t.Errorf("scratch_mb %d: %v, want it refused", mb, err)
		}
	}
	job.Grants.FS.ScratchMB = maxScratchMB
	if err := job.Validate(); err != nil {
		t.Errorf("scratch_mb %d refused: %v", int64(maxScratchMB), err)
	}
	deep := any(map[string]any{"v": 1})
	for range value.MaxDepth {
		deep = []any{deep}
	}
	if err := value.Check(deep, 0); err == nil {
		t.Fatal("a scalar nested deeper than MaxValueDepth accepted")
	}
	for _, bad := range []any{map[string]any{"f": func() {}}, []any{1, struct{}{}}} {
		if err := value.Check(bad, 0); err == nil {
			t.Fatalf("%#v accepted", bad)
		}
	}
}

func TestBlankMatchesTrimSpace(t *testing.T) {
	for _, s := range []string{
		"", " ", " \t\n\v\f\r", "x", " x", "x ", "\u00a0", " \u00a0 ", "\u2003x",
		"\u0085", "\xff", " \xff", "\u3000\u3000", "1+1",
	} {
		if got, want := blank(s), strings.TrimSpace(s) == ""; got != want {
			t.Errorf("blank(%q) = %v, strings.TrimSpace says %v", s, got, want)
		}
	}
}
