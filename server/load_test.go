package server_test

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testing/testenv"
	"github.com/airlock-sandbox/airlock/server"
)

func fds(t testing.TB) int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		testenv.Skipf(t, "descriptors cannot be counted without /proc/self/fd: %v", err)
	}
	return len(entries)
}

// children lists the live child processes of the test.
func children() []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	me := strconv.Itoa(os.Getpid())
	for _, e := range entries {
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		rest := string(stat[bytes.LastIndexByte(stat, ')')+1:])
		if f := strings.Fields(rest); len(f) > 1 && f[1] == me && f[0] != "Z" {
			out = append(out, e.Name())
		}
	}
	return out
}

// mounts counts the mounts the test process sees.
func mounts() int {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	return bytes.Count(data, []byte("\n"))
}

// settle waits (bounded) for the goroutine count to come back down.
func settle(limit int) int {
	n := runtime.NumGoroutine()
	for i := 0; i < 100 && n > limit; i++ {
		time.Sleep(20 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

// TestLoad drives the server over loopback with many concurrent expr and
// Starlark jobs (and commands where a command tier is available), then
// checks that nothing answered 5xx and that no goroutine or descriptor
// was left behind.
func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("the load test does not run under -short")
	}
	f := newFixture(t, func(c *server.Config) {
		c.Tenants[0].MaxConcurrent = 64
		c.Tenants[0].Limits = nil
	})
	jobs := map[string]string{
		"expr":     `{"kind":"expr","code":"sum(items) * k","input":{"items":[1,2,3,4],"k":3}}`,
		"starlark": `{"kind":"starlark","code":"result = sorted([(i * 7919) % 101 for i in range(200)])[:3]"}`,
	}
	counts := map[string]int{"expr": 3000, "starlark": 1000}
	// Commands, where a command tier is available, come as a separate
	// stream of two clients: OS sandboxes cost milliseconds to seconds each.
	const commandClients, commandsEach = 2, 8
	withCommands := false
	for _, name := range []string{"seccomp", "process", "gvisor", "microvm"} {
		if f.srv.Router().Unavailable(name) == nil {
			jobs["command"] = `{"kind":"command","argv":["/bin/true"],"situation":"internal","limits":{"wall_ms":60000}}`
			withCommands = true
			break
		}
	}
	// Warm up one connection and the tiers, then take the baseline: what
	// a tier keeps for its whole life once used (the process tier's
	// spawner and /etc template) is not a leak of the load.
	f.do("POST", "/v1/run", keyA, `{"kind":"expr","code":"1"}`)
	if withCommands {
		f.do("POST", "/v1/run", keyA, jobs["command"])
	}
	f.http.CloseClientConnections()
	baseG, baseFD, baseKids, baseMounts := settle(0), fds(t), children(), mounts()
	type sample struct {
		kind string
		d    time.Duration
	}
	work := make(chan string)
	results := make(chan sample, 256)
	var statusMu sync.Mutex
	statuses := map[int]int{}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	var wg sync.WaitGroup
	const workers = 32
	send := func(kind string) {
		req, _ := http.NewRequest("POST", f.http.URL+"/v1/run", strings.NewReader(jobs[kind]))
		req.Header.Set("Authorization", "Bearer "+keyA)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		results <- sample{kind, time.Since(start)}
		statusMu.Lock()
		statuses[resp.StatusCode]++
		statusMu.Unlock()
	}
	for range workers {
		wg.Go(func() {
			for kind := range work {
				send(kind)
			}
		})
	}
	if withCommands {
		for range commandClients {
			wg.Go(func() {
				for range commandsEach {
					send("command")
				}
			})
		}
	}
	lat := map[string][]time.Duration{}
	collected := make(chan struct{})
	go func() {
		for s := range results {
			lat[s.kind] = append(lat[s.kind], s.d)
		}
		close(collected)
	}()
	start := time.Now()
	left := maps.Clone(counts)
	for len(left) > 0 {
		for kind := range left { // interleave the kinds
			work <- kind
			if left[kind]--; left[kind] == 0 {
				delete(left, kind)
			}
		}
	}
	close(work)
	wg.Wait()
	close(results)
	<-collected
	elapsed := time.Since(start)
	total := 0
	for kind, d := range lat {
		total += len(d)
		t.Logf("%-8s %5d runs  p50 %-10v p99 %v", kind, len(d), percentile(d, 0.50), percentile(d, 0.99))
	}
	t.Logf("%d runs in %v (%.0f/s) with %d concurrent clients; statuses %v", total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), workers, statuses)
	for code, n := range statuses {
		if code != 200 {
			t.Errorf("%d responses with status %d", n, code)
		}
	}
	client.CloseIdleConnections()
	f.http.CloseClientConnections()
	if g := settle(baseG + 2); g > baseG+2 {
		buf := make([]byte, 1<<16)
		t.Errorf("goroutines: %d before, %d after\n%s", baseG, g, buf[:runtime.Stack(buf, true)])
	}
	// A used sandbox is destroyed in the background, off the caller's
	// path: its descriptors may outlive the last answer by a moment, which
	// is not a leak; one that stays is.
	fd := fds(t)
	for i := 0; i < 100 && fd > baseFD+2; i++ {
		time.Sleep(20 * time.Millisecond)
		fd = fds(t)
	}
	if fd > baseFD+2 {
		t.Errorf("file descriptors: %d before, %d after", baseFD, fd)
	}
	if k := children(); len(k) > len(baseKids) {
		t.Errorf("child processes: %v before, %v after", baseKids, k)
	}
	if m := mounts(); m != baseMounts {
		t.Errorf("mounts: %d before, %d after", baseMounts, m)
	}
	metrics := string(f.do("GET", "/metrics", "", nil).body)
	if want := fmt.Sprintf(`airlock_runs_total{tier="expr",outcome="ok"} %d`, counts["expr"]+1); !strings.Contains(metrics, want) {
		t.Errorf("metrics lack %q", want)
	}
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "airlock_runs_total{") {
			t.Log(line)
			if !strings.Contains(line, `outcome="ok"`) {
				t.Errorf("runs that did not succeed: %s", line)
			}
		}
	}
}
