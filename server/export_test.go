package server

import "time"

// Crash stops the server as a dying process would, for the replica
// tests: the shared state is cut off first, so the registry rows of its
// sessions and its leased runs stay behind as a crash leaves them.
func (s *Server) Crash() {
	_ = s.store.Close()
	_ = s.Close()
}

// SessionDir returns the host directory that is the scratch of session
// id, or "" when there is no such session or its tier keeps none.
func (s *Server) SessionDir(id string) string {
	s.mu.Lock()
	ss := s.sessions[id]
	s.mu.Unlock()
	if ss == nil {
		return ""
	}
	if d, ok := ss.s.(interface{ Dir() string }); ok {
		return d.Dir()
	}
	return ""
}

// SetBodyReadTimeout sets how long a request body may take to arrive, for
// a test that waits it out; it returns the function that restores it.
func SetBodyReadTimeout(d time.Duration) func() {
	old := bodyReadTimeout
	bodyReadTimeout = d
	return func() { bodyReadTimeout = old }
}

// SetAnswerWriteTimeout sets how long one write of an answer may wait
// for the client; it returns the function that restores it.
func SetAnswerWriteTimeout(d time.Duration) func() {
	old := answerWriteTimeout
	answerWriteTimeout = d
	return func() { answerWriteTimeout = old }
}

// MaxMCPSessions bounds a tenant's open MCP sessions.
const MaxMCPSessions = maxMCPSessions

// MaxConsoleStreams bounds a console session's event streams.
const MaxConsoleStreams = maxConsoleStreams

// WithClockError returns o for a replica whose clock is off by d.
func WithClockError(o Options, d time.Duration) Options {
	o.clockError = d
	return o
}

// SetShipBudget sets the bytes of audit records that may wait to be
// shipped to the shared state; it returns the function that restores it.
func SetShipBudget(n int64) func() {
	old := shipBudget
	shipBudget = n
	return func() { shipBudget = old }
}

// ShipQueued returns the bytes of audit records waiting to be shipped.
func (s *Server) ShipQueued() int64 {
	if s.audit.shipper == nil {
		return 0
	}
	return s.audit.shipper.queued.Load()
}

// MaxPendingPerTenant bounds a tenant's pending approval requests that
// one replica keeps.
const MaxPendingPerTenant = maxPendingPerTenant
