package state

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrations bring the schema from version i to i+1. They only ever grow:
// a replica of an older release must keep working against a newer schema
// while a rollout runs.
var migrations = []string{
	`CREATE TABLE airlock_redeemed (
		token text PRIMARY KEY,
		digest text NOT NULL,
		tenant text NOT NULL,
		expires timestamptz NOT NULL,
		redeemed timestamptz,
		replica text NOT NULL DEFAULT ''
	);
	CREATE TABLE airlock_quota (
		tenant text NOT NULL,
		window_start timestamptz NOT NULL,
		used integer NOT NULL,
		granted integer NOT NULL,
		PRIMARY KEY (tenant, window_start)
	);
	CREATE TABLE airlock_sessions (
		id text PRIMARY KEY,
		tenant text NOT NULL,
		tier text NOT NULL,
		replica text NOT NULL,
		addr text NOT NULL,
		lease_until timestamptz NOT NULL
	);
	CREATE INDEX airlock_sessions_replica ON airlock_sessions (replica);`,
	`CREATE TABLE airlock_records (
		id bigserial PRIMARY KEY,
		tenant text NOT NULL,
		at timestamptz NOT NULL,
		replica text NOT NULL,
		record jsonb NOT NULL
	);
	CREATE INDEX airlock_records_tenant ON airlock_records (tenant, id);`,
	`CREATE TABLE airlock_pending (
		digest text PRIMARY KEY,
		tenant text NOT NULL,
		tier text NOT NULL,
		rule text NOT NULL,
		job text NOT NULL,
		created timestamptz NOT NULL
	);
	CREATE INDEX airlock_pending_created ON airlock_pending (created);`,
	`CREATE TABLE airlock_bucket (
		tenant text PRIMARY KEY,
		tokens double precision NOT NULL,
		at timestamptz NOT NULL,
		granted integer NOT NULL
	);
	CREATE TABLE airlock_slots (
		tenant text NOT NULL,
		replica text NOT NULL,
		held integer NOT NULL,
		lease_until timestamptz NOT NULL,
		PRIMARY KEY (tenant, replica)
	);
	CREATE INDEX airlock_slots_replica ON airlock_slots (replica);
	CREATE TABLE airlock_decisions (
		digest text PRIMARY KEY,
		tenant text NOT NULL,
		approver text NOT NULL,
		reason text NOT NULL,
		denied boolean NOT NULL,
		expires timestamptz NOT NULL,
		at timestamptz NOT NULL
	);
	CREATE INDEX airlock_decisions_at ON airlock_decisions (at);`,
	// A record's exact text: jsonb refuses the escape \u0000, which a
	// job's code or a reason may hold. record keeps a copy jsonb takes,
	// for replicas of the releases before.
	`ALTER TABLE airlock_records ADD COLUMN line text;`,
	// Which replica uses an id, at which address, while its lease holds.
	`CREATE TABLE airlock_replicas (
		id text PRIMARY KEY,
		addr text NOT NULL,
		lease_until timestamptz NOT NULL
	);`,
}

// migrationLock is the advisory lock key replicas take while migrating,
// so that several starting at once apply each migration exactly once.
const migrationLock = 0x6169726c6f636b // "airlock"

type postgres struct{ pool *pgxpool.Pool }

// OpenPostgres connects to dsn and migrates the schema.
func OpenPostgres(ctx context.Context, dsn string) (Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("state: migrating the schema: %w", err)
	}
	return &postgres{pool: pool}, nil
}

func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	// A session-level lock: held across the migrations' transactions and
	// released even when one fails.
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(migrationLock)); err != nil {
		return err
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(migrationLock))
	}()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS airlock_schema (version integer NOT NULL)`); err != nil {
		return err
	}
	var version int
	err = conn.QueryRow(ctx, `SELECT version FROM airlock_schema`).Scan(&version)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err = conn.Exec(ctx, `INSERT INTO airlock_schema (version) VALUES (0)`); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if version > len(migrations) {
		return fmt.Errorf("the schema is at version %d, newer than this release knows (%d)", version, len(migrations))
	}
	for i := version; i < len(migrations); i++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, migrations[i]); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE airlock_schema SET version = $1`, i+1)
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
	}
	return nil
}

func (p *postgres) Redeem(ctx context.Context, r Redemption) (bool, error) {
	// One statement: the row is created redeemed, or an existing
	// unredeemed row is marked; a redeemed one is left alone and no row is
	// reported, whichever replica asks. A token already expired by the
	// database's clock is not redeemed at all: Sweep forgets redemptions
	// by that clock, so a replica whose clock lags cannot run a token
	// again once its row is gone.
	var live bool
	var n int
	err := p.pool.QueryRow(ctx, `WITH live AS (SELECT $4::timestamptz > now() AS ok),
		ins AS (INSERT INTO airlock_redeemed (token, digest, tenant, expires, redeemed, replica)
			SELECT $1, $2, $3, $4, now(), $5 FROM live WHERE live.ok
			ON CONFLICT (token) DO UPDATE SET redeemed = now(), replica = excluded.replica
			WHERE airlock_redeemed.redeemed IS NULL
			RETURNING 1)
		SELECT (SELECT ok FROM live), (SELECT count(*) FROM ins)::int`,
		r.Token, r.Digest, r.Tenant, r.Expires, r.Replica).Scan(&live, &n)
	if err != nil {
		return false, fmt.Errorf("state: redeeming: %w", err)
	}
	if !live {
		return false, ErrExpired
	}
	return n == 1, nil
}

// refilled is the bucket's content at the statement's time: $2 is the
// burst, $3 the runs per minute. The database's clock times the bucket,
// so replicas' clocks need not agree on it.
const refilled = `LEAST($2::float8, b.tokens + GREATEST(0, extract(epoch FROM now() - b.at)::float8) * $3::float8 / 60)`

func (p *postgres) Lease(ctx context.Context, tenant string, want int, bd Budget) (int, error) {
	// The row lock taken by the upsert serialises replicas leasing from
	// one bucket; granted is what this statement took.
	grant := `GREATEST(0, LEAST($4::int, floor(` + refilled + `)::int))`
	var granted int
	err := p.pool.QueryRow(ctx, `INSERT INTO airlock_bucket AS b (tenant, tokens, at, granted)
		VALUES ($1, $2::float8 - LEAST($4::int, $2::int), now(), LEAST($4::int, $2::int))
		ON CONFLICT (tenant) DO UPDATE
		SET granted = `+grant+`, tokens = `+refilled+` - `+grant+`, at = GREATEST(b.at, now())
		RETURNING granted`, tenant, bd.Burst, bd.PerMinute, max(0, want)).Scan(&granted)
	if err != nil {
		return 0, fmt.Errorf("state: leasing runs: %w", err)
	}
	return granted, nil
}

func (p *postgres) Return(ctx context.Context, tenant string, n int, bd Budget) error {
	_, err := p.pool.Exec(ctx, `UPDATE airlock_bucket AS b SET tokens = LEAST($2::float8, `+refilled+` + $4::int), at = GREATEST(b.at, now())
		WHERE tenant = $1`, tenant, bd.Burst, bd.PerMinute, n)
	if err != nil {
		return fmt.Errorf("state: returning runs: %w", err)
	}
	return nil
}

func (p *postgres) HoldSlots(ctx context.Context, h Hold) (int, error) {
	var granted int
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		// One tenant's holds change one transaction at a time: the sum
		// read below stays true until the commit.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('airlock_slots/' || $1, 0))`, h.Tenant); err != nil {
			return err
		}
		var others int
		if err := tx.QueryRow(ctx, `SELECT coalesce(sum(held), 0)::int FROM airlock_slots
			WHERE tenant = $1 AND replica <> $2 AND lease_until >= $3`, h.Tenant, h.Replica, h.Now).Scan(&others); err != nil {
			return err
		}
		granted = max(0, min(h.Want, h.Limit-others-h.Held))
		_, err := tx.Exec(ctx, `INSERT INTO airlock_slots (tenant, replica, held, lease_until) VALUES ($1, $2, $3, $4)
			ON CONFLICT (tenant, replica) DO UPDATE SET held = excluded.held, lease_until = excluded.lease_until`,
			h.Tenant, h.Replica, h.Held+granted, h.Until)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("state: holding run slots: %w", err)
	}
	return granted, nil
}

func (p *postgres) PutSession(ctx context.Context, s Session, limit int, now time.Time) (bool, error) {
	put := func(q interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}) error {
		_, err := q.Exec(ctx, `INSERT INTO airlock_sessions (id, tenant, tier, replica, addr, lease_until)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (id) DO UPDATE SET tenant = excluded.tenant, tier = excluded.tier,
		replica = excluded.replica, addr = excluded.addr, lease_until = excluded.lease_until`,
			s.ID, s.Tenant, s.Tier, s.Replica, s.Addr, s.Until)
		return err
	}
	if limit <= 0 {
		if err := put(p.pool); err != nil {
			return false, fmt.Errorf("state: registering session: %w", err)
		}
		return true, nil
	}
	ok := false
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		// A tenant's sessions are counted and added one transaction at a
		// time, so that replicas opening at once cannot pass the limit.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('airlock_sessions/' || $1, 0))`, s.Tenant); err != nil {
			return err
		}
		var live int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM airlock_sessions
			WHERE tenant = $1 AND lease_until >= $2 AND id <> $3`, s.Tenant, now, s.ID).Scan(&live); err != nil {
			return err
		}
		if live >= limit {
			return nil
		}
		ok = true
		return put(tx)
	})
	if err != nil {
		return false, fmt.Errorf("state: registering session: %w", err)
	}
	return ok, nil
}

func (p *postgres) Session(ctx context.Context, id string) (Session, bool, error) {
	s := Session{ID: id}
	err := p.pool.QueryRow(ctx, `SELECT tenant, tier, replica, addr, lease_until FROM airlock_sessions WHERE id = $1`, id).
		Scan(&s.Tenant, &s.Tier, &s.Replica, &s.Addr, &s.Until)
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, false, nil
	}
	if err != nil {
		return Session{}, false, fmt.Errorf("state: finding session: %w", err)
	}
	return s, true, nil
}

func (p *postgres) Renew(ctx context.Context, replica string, sessions []string, until time.Time) error {
	_, err := p.pool.Exec(ctx, `UPDATE airlock_sessions SET lease_until = $2 WHERE replica = $1 AND id = ANY($3)`, replica, until, sessions)
	if err == nil {
		_, err = p.pool.Exec(ctx, `UPDATE airlock_replicas SET lease_until = $2 WHERE id = $1`, replica, until)
	}
	if err == nil {
		_, err = p.pool.Exec(ctx, `UPDATE airlock_slots SET lease_until = $2 WHERE replica = $1`, replica, until)
	}
	if err != nil {
		return fmt.Errorf("state: renewing sessions: %w", err)
	}
	return nil
}

func (p *postgres) Claim(ctx context.Context, replica, addr string, lease time.Duration) error {
	if lease <= 0 {
		if _, err := p.pool.Exec(ctx, `DELETE FROM airlock_replicas WHERE id = $1 AND addr = $2`, replica, addr); err != nil {
			return fmt.Errorf("state: releasing the replica id: %w", err)
		}
		return nil
	}
	var holder string
	var until time.Time
	err := p.pool.QueryRow(ctx, `INSERT INTO airlock_replicas AS r (id, addr, lease_until)
		VALUES ($1, $2, now() + $3 * interval '1 microsecond')
		ON CONFLICT (id) DO UPDATE SET addr = excluded.addr, lease_until = excluded.lease_until
		WHERE r.addr = excluded.addr OR r.lease_until < now()
		RETURNING addr, lease_until`, replica, addr, lease.Microseconds()).Scan(&holder, &until)
	if errors.Is(err, pgx.ErrNoRows) {
		if err := p.pool.QueryRow(ctx, `SELECT addr, lease_until FROM airlock_replicas WHERE id = $1`, replica).Scan(&holder, &until); err != nil {
			return fmt.Errorf("state: claiming the replica id: %w", err)
		}
		return fmt.Errorf("%w: %s is used by the replica at %s (its lease holds until %s)", ErrReplicaInUse, replica, holder, until.UTC().Format(time.RFC3339))
	}
	if err != nil {
		return fmt.Errorf("state: claiming the replica id: %w", err)
	}
	return nil
}

func (p *postgres) DropSession(ctx context.Context, id string) error {
	if _, err := p.pool.Exec(ctx, `DELETE FROM airlock_sessions WHERE id = $1`, id); err != nil {
		return fmt.Errorf("state: dropping session: %w", err)
	}
	return nil
}

func (p *postgres) PutPending(ctx context.Context, pd Pending) error {
	_, err := p.pool.Exec(ctx, `INSERT INTO airlock_pending (digest, tenant, tier, rule, job, created)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (digest) DO UPDATE SET created = excluded.created`,
		pd.Digest, pd.Tenant, pd.Tier, pd.Rule, string(pd.Job), pd.Created)
	if err != nil {
		return fmt.Errorf("state: keeping an approval request: %w", err)
	}
	return nil
}

func (p *postgres) Pending(ctx context.Context, since time.Time, skip func(string, time.Time) bool) ([]Pending, error) {
	// First the digests and times (small), then the rows of those not
	// skipped.
	rows, err := p.pool.Query(ctx, `SELECT digest, created FROM airlock_pending
		WHERE created >= $1 ORDER BY created LIMIT 4096`, since)
	if err != nil {
		return nil, fmt.Errorf("state: listing approval requests: %w", err)
	}
	type asked struct {
		Digest  string
		Created time.Time
	}
	heads, err := pgx.CollectRows(rows, pgx.RowToStructByPos[asked])
	if err != nil {
		return nil, fmt.Errorf("state: listing approval requests: %w", err)
	}
	var want []string
	for _, h := range heads {
		if skip == nil || !skip(h.Digest, h.Created) {
			want = append(want, h.Digest)
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	rows, err = p.pool.Query(ctx, `SELECT digest, tenant, tier, rule, job, created FROM airlock_pending
		WHERE digest = ANY($1) AND created >= $2 ORDER BY created`, want, since)
	if err != nil {
		return nil, fmt.Errorf("state: listing approval requests: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Pending, error) {
		var pd Pending
		var job string
		err := r.Scan(&pd.Digest, &pd.Tenant, &pd.Tier, &pd.Rule, &job, &pd.Created)
		pd.Job = []byte(job)
		return pd, err
	})
	if err != nil {
		return nil, fmt.Errorf("state: listing approval requests: %w", err)
	}
	return out, nil
}

func (p *postgres) ForgetPending(ctx context.Context, before time.Time) error {
	if _, err := p.pool.Exec(ctx, `DELETE FROM airlock_pending WHERE created < $1`, before); err != nil {
		return fmt.Errorf("state: forgetting approval requests: %w", err)
	}
	return nil
}

func (p *postgres) Decide(ctx context.Context, d Decision, overwrite bool) (bool, error) {
	// Without overwrite, only a decision of an earlier request for the
	// same job (made before this one was asked) is replaced.
	q := `INSERT INTO airlock_decisions (digest, tenant, approver, reason, denied, expires, at)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (digest) DO UPDATE SET tenant = excluded.tenant,
		approver = excluded.approver, reason = excluded.reason, denied = excluded.denied, expires = excluded.expires, at = excluded.at
		WHERE $8 OR airlock_decisions.at < $9`
	tag, err := p.pool.Exec(ctx, q, d.Digest, d.Tenant, d.Approver, d.Reason, d.Denied, d.Expires, d.At, overwrite, d.Asked)
	if err != nil {
		return false, fmt.Errorf("state: recording a decision: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

func (p *postgres) Decisions(ctx context.Context, since time.Time) ([]Decision, error) {
	rows, err := p.pool.Query(ctx, `SELECT digest, tenant, approver, reason, denied, expires, at FROM airlock_decisions
		WHERE at >= $1 ORDER BY at LIMIT 4096`, since)
	if err != nil {
		return nil, fmt.Errorf("state: listing decisions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Decision, error) {
		var d Decision
		err := r.Scan(&d.Digest, &d.Tenant, &d.Approver, &d.Reason, &d.Denied, &d.Expires, &d.At)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("state: listing decisions: %w", err)
	}
	return out, nil
}

func (p *postgres) AddRecords(ctx context.Context, recs []Record) error {
	rows := make([][]any, len(recs))
	for i, r := range recs {
		rows[i] = []any{r.Tenant, r.Time, r.Replica, jsonbSafe(r.JSON), string(r.JSON)}
	}
	_, err := p.pool.CopyFrom(ctx, pgx.Identifier{"airlock_records"}, []string{"tenant", "at", "replica", "record", "line"}, pgx.CopyFromRows(rows))
	if err != nil {
		return fmt.Errorf("state: keeping records: %w", err)
	}
	return nil
}

// jsonbSafe is rec as jsonb takes it: every NUL of its strings (the
// escape \u0000, which jsonb refuses) written as U+FFFD instead. The exact
// text is kept beside it.
func jsonbSafe(rec []byte) string {
	if !bytes.Contains(rec, []byte(`\u0000`)) {
		return string(rec)
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(rec))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return `{}`
	}
	out, err := json.Marshal(replaceNUL(v))
	if err != nil {
		return `{}`
	}
	return string(out)
}

func replaceNUL(v any) any {
	switch v := v.(type) {
	case string:
		return strings.ReplaceAll(v, "\x00", "\uFFFD")
	case []any:
		for i := range v {
			v[i] = replaceNUL(v[i])
		}
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[strings.ReplaceAll(k, "\x00", "\uFFFD")] = replaceNUL(e)
		}
		return m
	}
	return v
}

func (p *postgres) Records(ctx context.Context, tenant string, limit int) ([][]byte, error) {
	rows, err := p.pool.Query(ctx, `SELECT coalesce(line, record::text) FROM (SELECT id, record, line FROM airlock_records
		WHERE tenant = $1 ORDER BY id DESC LIMIT $2) newest ORDER BY id`, tenant, limit)
	if err != nil {
		return nil, fmt.Errorf("state: listing records: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]byte, error) {
		var s string
		err := r.Scan(&s)
		return []byte(s), err
	})
	if err != nil {
		return nil, fmt.Errorf("state: listing records: %w", err)
	}
	return out, nil
}

func (p *postgres) TrimRecords(ctx context.Context, tenant string, keep int) error {
	_, err := p.pool.Exec(ctx, `DELETE FROM airlock_records WHERE tenant = $1 AND id <= (SELECT id FROM airlock_records
		WHERE tenant = $1 ORDER BY id DESC OFFSET $2 LIMIT 1)`, tenant, max(0, keep))
	if err != nil {
		return fmt.Errorf("state: trimming records: %w", err)
	}
	return nil
}

func (p *postgres) Sweep(ctx context.Context, now time.Time) error {
	// A redemption is forgotten a minute after its token expired by the
	// database's clock, the clock Redeem refuses expired tokens by: a
	// replica's clock running ahead cannot drop a row whose token a
	// replica lagging behind still takes. Lost sessions are kept a while,
	// so that their clients are told "lost", not "unknown".
	_, err := p.pool.Exec(ctx, `DELETE FROM airlock_redeemed WHERE expires < now() - interval '1 minute'`)
	if err == nil {
		_, err = p.pool.Exec(ctx, `DELETE FROM airlock_pending WHERE created < $1`, now.Add(-24*time.Hour))
	}
	if err == nil {
		_, err = p.pool.Exec(ctx, `DELETE FROM airlock_quota WHERE window_start < $1`, now.Add(-2*time.Minute))
	}
	if err == nil {
		_, err = p.pool.Exec(ctx, `DELETE FROM airlock_decisions WHERE at < $1`, now.Add(-24*time.Hour))
	}
	if err == nil {
		_, err = p.pool.Exec(ctx, `DELETE FROM airlock_bucket WHERE at < $1`, now.Add(-10*time.Minute))
	}
	if err == nil {
		_, err = p.pool.Exec(ctx, `DELETE FROM airlock_slots WHERE lease_until < $1`, now.Add(-time.Hour))
	}
	if err == nil {
		_, err = p.pool.Exec(ctx, `DELETE FROM airlock_sessions WHERE lease_until < $1`, now.Add(-time.Hour))
	}
	if err != nil {
		return fmt.Errorf("state: sweeping: %w", err)
	}
	return nil
}

func (p *postgres) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := p.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("state: reading the clock: %w", err)
	}
	return now, nil
}

func (p *postgres) Ping(ctx context.Context) error { return p.pool.Ping(ctx) }
func (p *postgres) Shared() bool                   { return true }
func (p *postgres) Close() error                   { p.pool.Close(); return nil }
