package gvisor

import (
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/tiers/internal/frame"
)

// pipeOut carries a cold sandbox's stdout and stderr to its output: runsc
// and the sandbox write the pipes' ends w, two goroutines read the other
// ends into out until every writer is gone.
type pipeOut struct {
	out  *output
	r, w [2]*os.File
	wg   sync.WaitGroup
	// held counts the readers that hold output the output has not taken
	// yet (a slow sink holds them).
	held atomic.Int32
	once sync.Once
}

// pipeIdle is how long drain waits for output that stops arriving while
// none is held.
const pipeIdle = 5 * time.Second

func newPipeOut(out *output) (*pipeOut, error) {
	p := &pipeOut{out: out}
	for i := range p.r {
		var err error
		if p.r[i], p.w[i], err = os.Pipe(); err != nil {
			p.close()
			return nil, err
		}
	}
	for i, b := range []*strings.Builder{&out.stdout, &out.stderr} {
		p.wg.Add(1)
		go p.copy(p.r[i], b)
	}
	return p, nil
}

// started closes the write ends this process holds, once runsc has its
// own (or could not start): the readers then see the end of the output
// once runsc and the sandbox are gone.
func (p *pipeOut) started() {
	for i, f := range p.w {
		if f != nil {
			f.Close()
			p.w[i] = nil
		}
	}
}

func (p *pipeOut) copy(r *os.File, b *strings.Builder) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			p.held.Add(1)
			p.out.write(b, buf[:n])
			p.held.Add(-1)
		}
		if err != nil {
			return
		}
	}
}

// drain waits for the output to end, once runsc has exited: however long
// a slow sink holds it (and one period more once it lets go); otherwise,
// when output stops arriving for pipeIdle (a process that kept a write
// end), it stops reading.
func (p *pipeOut) drain() {
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	if !frame.WaitHeld(done, pipeIdle, func() bool { return p.held.Load() > 0 }) {
		p.close()
		<-done
	}
}

// close closes every end this process holds; the readers return.
func (p *pipeOut) close() {
	p.started()
	p.once.Do(func() {
		for _, f := range p.r {
			if f != nil {
				f.Close()
			}
		}
	})
}
