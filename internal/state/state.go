// Package state is what the replicas of one airlock service share: which
// approval tokens were redeemed, how much of each tenant's rate budget is
// taken, and which replica owns each session. The embedded store keeps it
// in the process (one replica, today's behaviour); the PostgreSQL store
// shares it between every replica pointed at one database.
package state

import (
	"context"
	"errors"
	"strings"
	"time"
)

// Store is the shared state. Methods are safe for concurrent use; every
// write is atomic on its own, so replicas need no other coordination.
type Store interface {
	// Redeem marks an approval token used and reports whether this call
	// did it: a token is redeemed at most once, across every replica.
	Redeem(ctx context.Context, r Redemption) (bool, error)
	// Lease takes up to want runs of the tenant's budget of limit runs in
	// the window (a minute, named by its start) and returns how many it
	// got: 0 when the budget is spent.
	Lease(ctx context.Context, tenant string, window time.Time, want, limit int) (int, error)
	// Return gives n leased, unused runs of the window back.
	Return(ctx context.Context, tenant string, window time.Time, n int) error
	// PutSession registers (or re-registers) a session.
	PutSession(ctx context.Context, s Session) error
	// Session finds a registered session; ok is false when there is none.
	Session(ctx context.Context, id string) (s Session, ok bool, err error)
	// Renew extends the lease of every session the replica owns.
	Renew(ctx context.Context, replica string, until time.Time) error
	// DropSession forgets a closed session.
	DropSession(ctx context.Context, id string) error
	// PutPending keeps an approval request for any replica's approvers.
	PutPending(ctx context.Context, p Pending) error
	// Pending lists the approval requests made since since.
	Pending(ctx context.Context, since time.Time) ([]Pending, error)
	// AddRecords keeps audit records, for any replica to list.
	AddRecords(ctx context.Context, recs []Record) error
	// Records returns a tenant's newest records (at most limit), oldest
	// first.
	Records(ctx context.Context, tenant string, limit int) ([][]byte, error)
	// Sweep forgets redemptions and windows that expired before now.
	Sweep(ctx context.Context, now time.Time) error
	// Ping reports whether the store answers.
	Ping(ctx context.Context) error
	// Shared reports whether other processes see this state.
	Shared() bool
	Close() error
}

// Redemption is one use of an approval token. Token is a hash of it, so
// the store never holds a usable token.
type Redemption struct {
	Token   string
	Digest  string
	Tenant  string
	Expires time.Time
	Replica string
}

// Pending is a job waiting for an approver; Job is its JSON, secrets
// redacted.
type Pending struct {
	Digest  string
	Tenant  string
	Tier    string
	Rule    string
	Job     []byte
	Created time.Time
}

// Record is an audit record as the server encoded it (JSON).
type Record struct {
	Tenant  string
	Time    time.Time
	Replica string
	JSON    []byte
}

// Session is a session's registry row: the replica that owns it (the only
// one holding its sandbox), where that replica is reached, and until when
// its owner vouches for it.
type Session struct {
	ID      string
	Tenant  string
	Tier    string
	Replica string
	Addr    string // the owner's base URL ("http://10.0.0.7:8420")
	Until   time.Time
}

// ErrUnknownScheme is returned by Open for a state setting it cannot use.
var ErrUnknownScheme = errors.New("state: want empty, \"embedded\", a postgres:// URL or a key=value DSN")

// Open returns the store a serve configuration's `state` names: empty or
// "embedded" for the embedded store; a postgres:// URL or a libpq
// key=value DSN (such as "host=/run/postgresql dbname=airlock") for
// PostgreSQL, whose schema it brings up to date.
func Open(ctx context.Context, setting string) (Store, error) {
	switch {
	case setting == "" || setting == "embedded":
		return NewEmbedded(), nil
	case strings.HasPrefix(setting, "postgres://"), strings.HasPrefix(setting, "postgresql://"), strings.Contains(setting, "="):
		return OpenPostgres(ctx, setting)
	}
	return nil, ErrUnknownScheme
}

// Window is the start of the rate window t falls in.
func Window(t time.Time) time.Time { return t.UTC().Truncate(time.Minute) }
