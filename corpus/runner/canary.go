package runner

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/corpus"
)

// CanaryEnv is the variable planted in the runner's environment (and so in
// every child's): its value is a secret no case may reveal.
const CanaryEnv = "AIRLOCK_CANARY"

// canaries are the traps planted for one run: a secret in the environment,
// a secret file, and an HTTP sink and a DNS resolver on loopback that count
// the hits carrying each case's token.
type canaries struct {
	dir        string
	file       string
	envSecret  string
	fileSecret string

	http *http.Server
	url  string
	dns  *dns.Server
	dnsA string

	// A world-connectable host Unix socket and an abstract one, each
	// answering with a secret; and, when the Go toolchain is here, a
	// static binary for the benign "static Go binary" case.
	sockSecret string
	sockPath   string
	abstract   string
	sockets    []net.Listener
	staticB64  string

	mu   sync.Mutex
	hits map[string][]string // token -> what reached a sink
	undo func()
}

func secret(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func plant() (_ *canaries, err error) {
	c := &canaries{hits: map[string][]string{}, envSecret: secret("canary-env-"), fileSecret: secret("canary-file-")}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if c.dir, err = os.MkdirTemp("", "airlock-corpus-"); err != nil {
		return nil, err
	}
	// Traversable (not listable), so a sandbox could reach the socket
	// below if its boundary failed; the secret file itself stays 0600.
	if err = os.Chmod(c.dir, 0o711); err != nil {
		return nil, err
	}
	c.file = filepath.Join(c.dir, "secret")
	if err = os.WriteFile(c.file, []byte(c.fileSecret), 0o600); err != nil {
		return nil, err
	}
	old, had := os.LookupEnv(CanaryEnv)
	if err = os.Setenv(CanaryEnv, c.envSecret); err != nil {
		return nil, err
	}
	c.undo = func() {
		if had {
			_ = os.Setenv(CanaryEnv, old)
		} else {
			_ = os.Unsetenv(CanaryEnv)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c.url = "http://" + ln.Addr().String()
	c.http = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		c.hit(token, fmt.Sprintf("HTTP %s %s from %s", r.Method, r.URL.Path, r.RemoteAddr))
		http.Error(w, "sink", http.StatusTeapot)
	})}
	go func() { _ = c.http.Serve(ln) }()

	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c.dnsA = pc.LocalAddr().String()
	c.dns = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		for _, qq := range q.Question {
			token, _, _ := strings.Cut(strings.TrimSuffix(qq.Name, "."), ".")
			c.hit(token, fmt.Sprintf("DNS %s %s", dns.TypeToString[qq.Qtype], qq.Name))
		}
		m := new(dns.Msg)
		m.SetRcode(q, dns.RcodeNameError)
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	c.dns.NotifyStartedFunc = func() { close(started) }
	go func() { _ = c.dns.ActivateAndServe() }()
	<-started
	if err = c.plantSockets(); err != nil {
		return nil, err
	}
	c.staticB64 = corpus.StaticBinaryB64()
	return c, nil
}

func (c *canaries) plantSockets() error {
	c.sockSecret = secret("canary-socket-")
	dir := filepath.Join(c.dir, "sock")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	c.sockPath = filepath.Join(dir, "host.sock")
	c.abstract = secret("airlock-canary-")
	for _, addr := range []string{c.sockPath, "@" + c.abstract} {
		ln, err := net.Listen("unix", addr)
		if err != nil {
			return err
		}
		c.sockets = append(c.sockets, ln)
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = conn.Write([]byte(c.sockSecret))
				_ = conn.Close()
			}
		}()
	}
	return os.Chmod(c.sockPath, 0o777)
}

func (c *canaries) hit(token, what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hits[token] = append(c.hits[token], what)
}

// taken returns what reached the sinks with a token.
func (c *canaries) taken(token string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits[token]
}

// vars are the substitutions a case with the given token sees.
func (c *canaries) vars(token string) map[string]string {
	v := map[string]string{
		"CANARY_FILE": c.file,
		"CANARY_ENV":  CanaryEnv,
		"CANARY_URL":  c.url + "/" + token,
		"CANARY_HOST": token + ".canary.airlock.test",
		"CANARY_DNS":  c.dnsA,
		"GRANT_DIR":   filepath.Join(c.dir, "granted"),
		"HOST_SOCKET": c.sockPath,
		// The abstract socket's name, without the leading NUL.
		"HOST_ABSTRACT": c.abstract,
	}
	if c.staticB64 != "" {
		v["STATIC_BINARY_B64"] = c.staticB64
	}
	return v
}

// secrets are the values whose presence in a result is an escape.
func (c *canaries) secrets() []string { return []string{c.envSecret, c.fileSecret, c.sockSecret} }

// leaked says which canaries' secrets a result holds.
func (c *canaries) leaked(res airlock.Result) []string {
	all := fmt.Sprint(res.Value) + "\x00" + res.Stdout + "\x00" + res.Stderr
	if res.Error != nil {
		all += "\x00" + res.Error.Message
	}
	if res.Stopped != nil {
		all += "\x00" + res.Stopped.Detail
	}
	var out []string
	for name, s := range map[string]string{"environment variable " + CanaryEnv: c.envSecret, "file " + c.file: c.fileSecret, "host socket " + c.sockPath: c.sockSecret} {
		if strings.Contains(all, s) {
			out = append(out, fmt.Sprintf("the result holds the secret of the %s (%s…)", name, s[:len(s)-16]))
		}
	}
	return out
}

// grantDir builds the directory cases may be granted: a file, and symlinks
// pointing out of it at the secret.
func (c *canaries) grantDir() error {
	g := filepath.Join(c.dir, "granted")
	return errors.Join(
		os.Mkdir(g, 0o755),
		os.WriteFile(filepath.Join(g, "ok.txt"), []byte("granted\n"), 0o644),
		os.Symlink("../secret", filepath.Join(g, "rel-escape")),
		os.Symlink(c.file, filepath.Join(g, "abs-escape")),
	)
}

func (c *canaries) close() {
	for _, ln := range c.sockets {
		_ = ln.Close()
	}
	if c.http != nil {
		_ = c.http.Close()
	}
	if c.dns != nil {
		_ = c.dns.Shutdown()
	}
	if c.undo != nil {
		c.undo()
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}
