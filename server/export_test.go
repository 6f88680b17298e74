package server

// Crash stops the server as a dying process would, for the replica
// tests: the shared state is cut off first, so the registry rows of its
// sessions and its leased runs stay behind as a crash leaves them.
func (s *Server) Crash() {
	_ = s.store.Close()
	_ = s.Close()
}
