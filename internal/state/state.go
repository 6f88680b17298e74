// Package state is what the replicas of one airlock service share: which
// approval tokens were redeemed, how much of each tenant's rate budget is
// taken, and which replica owns each session. The embedded store keeps it
// in the process (one replica, today's behaviour); the PostgreSQL store
// shares it between every replica pointed at one database.
package state

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"time"
)

// Store is the shared state. Methods are safe for concurrent use; every
// write is atomic on its own, so replicas need no other coordination.
type Store interface {
	// Redeem marks an approval token used and reports whether this call
	// did it: a token is redeemed at most once, across every replica. A
	// shared store refuses a token past its expiry by its own clock with
	// ErrExpired.
	Redeem(ctx context.Context, r Redemption) (bool, error)
	// Lease takes up to want runs from the tenant's budget, a token bucket
	// shared by every replica, and returns how many it got: 0 when the
	// bucket is empty.
	Lease(ctx context.Context, tenant string, want int, b Budget) (int, error)
	// Return puts n leased, unused runs back into the bucket (never above
	// its burst).
	Return(ctx context.Context, tenant string, n int, b Budget) error
	// HoldSlots sets what the replica holds of the tenant's limit of runs
	// in flight: h.Held, plus up to h.Want more while every replica's
	// holds that have not lapsed at h.Now leave room. It returns how many
	// more it got (Want 0 only sets the hold, to give slots back). The
	// hold lasts until h.Until; Renew extends it.
	HoldSlots(ctx context.Context, h Hold) (int, error)
	// PutSession registers (or re-registers) a session. With limit > 0 a
	// new session is registered only while its tenant has fewer than
	// limit sessions whose lease holds at now; ok reports whether it was.
	PutSession(ctx context.Context, s Session, limit int, now time.Time) (ok bool, err error)
	// Session finds a registered session; ok is false when there is none.
	Session(ctx context.Context, id string) (s Session, ok bool, err error)
	// Renew extends the lease of the replica's run slots, and of its
	// sessions named in sessions: a registry row of the replica that it
	// does not hold (one whose drop or registration the replica took for
	// failed) lapses, and no longer counts toward its tenant's sessions.
	Renew(ctx context.Context, replica string, sessions []string, until time.Time) error
	// Claim takes the replica id for the replica reached at addr, for
	// lease (by the store's clock; Renew extends it): ErrReplicaInUse
	// while another address holds it. A lease of 0 gives it back.
	Claim(ctx context.Context, replica, addr string, lease time.Duration) error
	// DropSession forgets a closed session.
	DropSession(ctx context.Context, id string) error
	// PutPending keeps an approval request for any replica's approvers.
	PutPending(ctx context.Context, p Pending) error
	// Pending lists the approval requests made since since, but for those
	// skip reports true for: their jobs are not read. A replica skips
	// what it holds already, so that a request (and its job) crosses
	// from the store once, not on every lookup.
	// skip is given each request's digest and when it was (last) asked.
	Pending(ctx context.Context, since time.Time, skip func(digest string, created time.Time) bool) ([]Pending, error)
	// ForgetPending forgets the approval requests made before before:
	// once expired, no replica lists them.
	ForgetPending(ctx context.Context, before time.Time) error
	// Decide records an approver's decision. Without overwrite a digest
	// already decided at or after d.Asked (the decision of this request,
	// not of an earlier one for the same job) is left as it is and ok is
	// false: across every replica, the first decision stands.
	Decide(ctx context.Context, d Decision, overwrite bool) (ok bool, err error)
	// Decisions lists the decisions made since since.
	Decisions(ctx context.Context, since time.Time) ([]Decision, error)
	// AddRecords keeps audit records, for any replica to list.
	AddRecords(ctx context.Context, recs []Record) error
	// Records returns a tenant's newest records (at most limit), oldest
	// first.
	Records(ctx context.Context, tenant string, limit int) ([][]byte, error)
	// TrimRecords forgets a tenant's records but the newest keep: what
	// Records lists is all the store needs, and a tenant's runs must not
	// grow it without end (each replica's trail is the full record).
	TrimRecords(ctx context.Context, tenant string, keep int) error
	// Sweep forgets redemptions and windows that expired before now.
	Sweep(ctx context.Context, now time.Time) error
	// Now is the store's clock. Replicas time leases (of run slots and
	// sessions) by it, not by their own clocks, which may disagree.
	Now(ctx context.Context) (time.Time, error)
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

// TokenHash is what a Redemption holds of token.
func TokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
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

// Decision is an approver's answer to an approval request. It holds no
// token: a replica issues the token again from the claims (digest,
// tenant, expiry) with the approval key every replica shares.
type Decision struct {
	Digest   string
	Tenant   string
	Approver string
	Reason   string
	Denied   bool
	Expires  time.Time
	At       time.Time
	// Asked is when the request decided was made; it is not kept, only
	// compared by Decide.
	Asked time.Time
}

// Hold is a replica's share of a tenant's runs in flight.
type Hold struct {
	Tenant, Replica   string
	Held, Want, Limit int
	Now, Until        time.Time
}

// Budget is a tenant's rate quota as a token bucket: PerMinute runs a
// minute, at most Burst of them at once.
type Budget struct{ PerMinute, Burst int }

// BudgetOf is the bucket for perMinute runs a minute: a burst of a tenth
// of the minute's runs (at least 1).
func BudgetOf(perMinute int) Budget { return Budget{PerMinute: perMinute, Burst: max(1, perMinute/10)} }

// refill is the bucket's content after elapsed, starting from tokens.
func (b Budget) refill(tokens float64, elapsed time.Duration) float64 {
	return min(float64(b.Burst), tokens+max(0, elapsed.Seconds())*float64(b.PerMinute)/60)
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

// ErrExpired is Redeem's refusal of a token whose expiry passed by the
// shared store's clock (which may differ from the replica's).
var ErrExpired = errors.New("state: the token expired by the shared state's clock")

// ErrReplicaInUse is Claim's refusal of an id another replica holds.
var ErrReplicaInUse = errors.New("state: the replica id is in use")

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
