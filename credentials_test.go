package airlock_test

import (
	"errors"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// TestCredentialsWire: grants.credentials decode strictly, validate their
// names and references, and no tier below level 5 prepares them.
func TestCredentialsWire(t *testing.T) {
	job, err := airlock.DecodeJob([]byte(`{"kind":"command","argv":["env"],"situation":"credentials",
		"grants":{"credentials":[{"env":"GITHUB_TOKEN","ref":"github-readonly"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := (airlock.Credential{Env: "GITHUB_TOKEN", Ref: "github-readonly"}); len(job.Grants.Credentials) != 1 || job.Grants.Credentials[0] != want {
		t.Fatalf("credentials = %+v", job.Grants.Credentials)
	}
	if job.Grants.Hermetic() {
		t.Error("a job with credentials is hermetic")
	}
	for _, bad := range []string{
		`{"kind":"command","argv":["env"],"grants":{"credentials":[{"env":"A","ref":"r","value":"x"}]}}`,
		`{"kind":"command","argv":["env"],"grants":{"credentials":[{"env":"1A","ref":"r"}]}}`,
		`{"kind":"command","argv":["env"],"grants":{"credentials":[{"env":"A","ref":"../r"}]}}`,
		`{"kind":"command","argv":["env"],"grants":{"credentials":[{"env":"A","ref":""}]}}`,
		`{"kind":"command","argv":["env"],"grants":{"credentials":[{"env":"A","ref":"r"},{"env":"A","ref":"s"}]}}`,
		`{"kind":"command","argv":["env"],"grants":{"secrets":{"A":"v"},"credentials":[{"env":"A","ref":"r"}]}}`,
		`{"kind":"command","argv":["env"],"grants":{"credentials":{"A":"r"}}}`,
	} {
		j, err := airlock.DecodeJob([]byte(bad))
		if err == nil {
			err = j.Validate()
		}
		var inv *airlock.InvalidJob
		if !errors.As(err, &inv) {
			t.Errorf("%s: err = %v, want *InvalidJob", bad, err)
		}
	}
	_, err = airlock.DefaultLimitPolicy().Prepare(job)
	var na *airlock.NotAdmitted
	if !errors.As(err, &na) {
		t.Errorf("Prepare with credentials: err = %v, want *NotAdmitted", err)
	}
}
