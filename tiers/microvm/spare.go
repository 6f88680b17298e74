package microvm

import (
	"context"
	"sync"
)

// spareID begins the names of spare VMMs (their state directories).
const spareID = "spare-"

// spares keeps one VMM launched ahead of need for restores: QEMU started
// paused, waiting for a migration stream to be named (-incoming defer),
// holding no guest state. Each is used for one restore and never again.
type spares struct {
	mu       sync.Mutex
	v        *vm
	mem      int64
	inflight chan struct{} // closed when the launch in flight ends; nil: none
	closed   bool
	wg       sync.WaitGroup
}

// spareSpec is the VMM a restore of a snapshot of mem MiB needs.
func (t *Tier) spareSpec(mem int64) vmSpec {
	return vmSpec{memMB: mem, vcpus: t.cfg.vcpus, qmp: true, paused: true, incoming: true}
}

// take returns the spare for mem, waiting for one being launched, or nil.
func (s *spares) take(ctx context.Context, mem int64) *vm {
	s.mu.Lock()
	if ch := s.inflight; ch != nil && s.mem == mem {
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		}
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	v := s.v
	if v == nil || s.mem != mem {
		return nil
	}
	s.v = nil
	select {
	case <-v.done: // QEMU died while it waited
		s.wg.Go(v.kill)
		return nil
	default:
		return v
	}
}

// fill launches a spare for mem in the background unless one is there or
// on its way; a spare of another size is replaced.
func (s *spares) fill(t *Tier, mem int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.inflight != nil || (s.v != nil && s.mem == mem) {
		return
	}
	if s.v != nil {
		s.wg.Go(s.v.kill)
		s.v = nil
	}
	ch := make(chan struct{})
	s.inflight, s.mem = ch, mem
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		v, err := t.launch(context.Background(), t.spareSpec(mem))
		s.mu.Lock()
		defer s.mu.Unlock()
		defer close(ch)
		s.inflight = nil
		if err != nil || s.closed {
			if v != nil {
				s.wg.Go(v.kill)
			}
			return
		}
		s.v = v
	}()
}

// ready fills the spare for mem and waits for it to be launched.
func (s *spares) ready(ctx context.Context, t *Tier, mem int64) {
	s.fill(t, mem)
	s.mu.Lock()
	ch := s.inflight
	s.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
}

// close kills the spare, waits for launches and kills in flight, and
// launches no more.
func (s *spares) close() {
	s.mu.Lock()
	s.closed = true
	v := s.v
	s.v = nil
	s.mu.Unlock()
	s.wg.Wait()
	if v != nil {
		v.kill()
	}
}
