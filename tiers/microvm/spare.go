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
	key      vmKey
	inflight chan struct{} // closed when the launch in flight ends; nil: none
	closed   bool
	wg       sync.WaitGroup
}

// spareSpec is the VMM a restore of a snapshot of mem MiB and image h
// needs.
func (t *Tier) spareSpec(mem int64, h *heldImage) vmSpec {
	return vmSpec{memMB: mem, vcpus: t.cfg.vcpus, qmp: true, paused: true, incoming: true, img: h}
}

// take returns the spare for key, waiting for one being launched, or nil.
func (s *spares) take(ctx context.Context, key vmKey) *vm {
	s.mu.Lock()
	if ch := s.inflight; ch != nil && s.key == key {
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
	if v == nil || s.key != key {
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

// fill launches a spare for mem and image h in the background unless one
// is there or on its way; a spare of another size or image is replaced.
// The spare holds h from the launch on.
func (s *spares) fill(t *Tier, mem int64, h *heldImage) {
	key := vmKey{mem, digestOf(h)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.inflight != nil || (s.v != nil && s.key == key) {
		return
	}
	if s.v != nil {
		s.wg.Go(s.v.kill)
		s.v = nil
	}
	ch := make(chan struct{})
	s.inflight, s.key = ch, key
	if h != nil {
		h.ref() // until the launch has its own
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		v, err := t.launch(context.Background(), t.spareSpec(mem, h))
		if h != nil {
			h.unref()
		}
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

// ready fills the spare for mem and image h and waits for it to be
// launched.
func (s *spares) ready(ctx context.Context, t *Tier, mem int64, h *heldImage) {
	s.fill(t, mem, h)
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
