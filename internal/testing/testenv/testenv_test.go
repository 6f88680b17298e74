package testenv

import "testing"

func TestStrict(t *testing.T) {
	for _, c := range []struct {
		ci, allow string
		want      bool
	}{
		{"true", "", true},
		{"true", "1", false},
		{"", "", false},
		{"false", "", false},
	} {
		t.Setenv("CI", c.ci)
		t.Setenv("AIRLOCK_ALLOW_SKIP", c.allow)
		if got := Strict(); got != c.want {
			t.Errorf("CI=%q AIRLOCK_ALLOW_SKIP=%q: Strict() = %v, want %v", c.ci, c.allow, got, c.want)
		}
	}
}
