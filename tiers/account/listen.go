package account

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Allow lists the peers an executor serves: a connecting process whose
// uid is in UIDs or whose gid is in GIDs.
type Allow struct {
	UIDs []uint32 `json:"uids,omitempty"`
	GIDs []uint32 `json:"gids,omitempty"`
}

func (a Allow) permits(uid, gid uint32) bool {
	return slices.Contains(a.UIDs, uid) || slices.Contains(a.GIDs, gid)
}

func (a Allow) String() string {
	var parts []string
	for _, u := range a.UIDs {
		parts = append(parts, fmt.Sprintf("uid %d", u))
	}
	for _, g := range a.GIDs {
		parts = append(parts, fmt.Sprintf("gid %d", g))
	}
	if len(parts) == 0 {
		return "nobody"
	}
	return strings.Join(parts, ", ")
}

// Listen listens on a Unix socket at path (replacing a stale one) and
// accepts only peers that allow permits, by their SO_PEERCRED; any other
// is answered 403 with the reason and closed, and never reaches the
// server behind the listener.
func Listen(path string, allow Allow) (net.Listener, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: an executor already serves it", path)
		}
		os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	// Reachability is the directory's to decide; who is served, the peer
	// check's.
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, err
	}
	return &peerListener{Listener: ln, allow: allow, refusing: make(chan struct{}, maxRefusing)}, nil
}

// maxRefusing bounds the refused connections answered at once: past it,
// one is closed without an answer, so that a peer the executor does not
// serve cannot hold its goroutines and descriptors by the thousand.
const maxRefusing = 64

type peerListener struct {
	net.Listener
	allow    Allow
	refusing chan struct{}
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		cred, err := PeerCred(c)
		if err == nil && l.allow.permits(cred.Uid, cred.Gid) {
			return c, nil
		}
		why := "the peer's credentials could not be read"
		if err == nil {
			why = fmt.Sprintf("peer uid %d gid %d is not allowed by this executor (allowed: %s)", cred.Uid, cred.Gid, l.allow)
		}
		select {
		case l.refusing <- struct{}{}:
			go func() {
				defer func() { <-l.refusing }()
				refusePeer(c, why)
			}()
		default:
			c.Close()
		}
	}
}

// refusePeer reads the peer's request head (so that closing does not
// reset what it sent) and answers 403 in the API's error shape.
func refusePeer(c net.Conn, why string) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if req, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
		req.Body.Close()
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"kind": "not_admitted", "message": "refused: " + why}})
	fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}

// MaxRemoteConns bounds the connections an executor's mutual-TLS port
// holds open at once: one without a certificate still holds a goroutine
// until its handshake times out, so past the bound a new connection is
// closed as soon as it is accepted.
const MaxRemoteConns = 256

// LimitConns closes each connection ln accepts while max others are open.
func LimitConns(ln net.Listener, max int) net.Listener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, max)}
}

type limitListener struct {
	net.Listener
	slots chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
		default:
			c.Close()
		}
	}
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
