package account

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
)

// Front is what an executor serves its callers, in front of its server's
// api: the requests the account tier makes (POST /v1/run, opening a
// session, running in and closing it) and GET /v1/sessions, nothing else
// (no audit trail, approvals, MCP or console: the executor's callers share
// one tenant of its server, and each must not see the others' jobs). A
// session is the caller's that opened it (see [WithPeer]): to any other
// it is as unknown as one that never existed, in the list too.
func (e *Executor) Front(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		switch {
		case r.Method == http.MethodPost && (p == "/v1/run" || p == "/v1/sessions"), r.Method == http.MethodGet && p == "/healthz":
			api.ServeHTTP(w, r)
		case r.Method == http.MethodGet && p == "/v1/sessions":
			e.listSessions(w, r, api)
		case strings.HasPrefix(p, "/v1/sessions/"):
			id, rest, _ := strings.Cut(strings.TrimPrefix(p, "/v1/sessions/"), "/")
			if (r.Method == http.MethodPost && rest == "run") || (r.Method == http.MethodDelete && rest == "" && !strings.HasSuffix(p, "/")) {
				if !e.owns(id, peerOf(r.Context())) {
					frontError(w, http.StatusNotFound, "not_found", "unknown session "+id)
					return
				}
				api.ServeHTTP(w, r)
				return
			}
			fallthrough
		default:
			frontError(w, http.StatusNotFound, "not_found", r.Method+" "+p+" is not served by an account's executor")
		}
	})
}

// listSessions answers the server's list of sessions without those of
// other callers.
func (e *Executor) listSessions(w http.ResponseWriter, r *http.Request, api http.Handler) {
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	api.ServeHTTP(rec, r)
	var list []map[string]any
	if rec.status != http.StatusOK || json.Unmarshal(rec.body.Bytes(), &list) != nil {
		frontError(w, http.StatusInternalServerError, "internal", "the executor's sessions could not be listed")
		return
	}
	peer := peerOf(r.Context())
	mine := []map[string]any{}
	for _, s := range list {
		if id, _ := s["id"].(string); e.owns(id, peer) {
			mine = append(mine, s)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(mine)
}

// owns says whether the executor's session id was opened by peer.
func (e *Executor) owns(id, peer string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	owner, ok := e.owners[id]
	return ok && owner == peer
}

func frontError(w http.ResponseWriter, status int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"kind": kind, "message": msg}})
}

type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) WriteHeader(status int)      { r.status = status }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
