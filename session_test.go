package airlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock"
)

func TestSessionOptionsResolve(t *testing.T) {
	_, err := airlock.SessionOptions{TTL: -time.Second}.Resolve()
	var inv *airlock.InvalidJob
	if !errors.As(err, &inv) || inv.Field != "ttl" {
		t.Fatalf("negative TTL: %v", err)
	}
	a, err := airlock.SessionOptions{TTL: time.Minute}.Resolve()
	if err != nil || len(a.ID) != 16 || a.TTL != time.Minute {
		t.Fatalf("empty ID: %+v %v", a, err)
	}
	b, _ := airlock.SessionOptions{}.Resolve()
	if a.ID == b.ID {
		t.Fatal("two random session IDs are equal")
	}
	if c, err := (airlock.SessionOptions{ID: "mine"}).Resolve(); err != nil || c.ID != "mine" {
		t.Fatalf("a given ID was not kept: %+v %v", c, err)
	}
}
