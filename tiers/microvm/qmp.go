package microvm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// qmpClient speaks the QEMU Machine Protocol: JSON objects, one per line;
// replies carry "return" or "error", events carry "event" and are skipped.
type qmpClient struct {
	mu   sync.Mutex
	conn *net.UnixConn
	r    *bufio.Reader
}

// dialQMP connects to a QMP socket QEMU listens on, retrying until QEMU has
// created it (or exited: done), and negotiates capabilities.
func dialQMP(ctx context.Context, path string, done <-chan struct{}) (*qmpClient, error) {
	for {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err == nil {
			q := &qmpClient{conn: c, r: bufio.NewReaderSize(c, 1<<16)}
			if _, err := q.readReply(); err != nil { // greeting
				c.Close()
				return nil, err
			}
			if _, err := q.do("qmp_capabilities", nil); err != nil {
				c.Close()
				return nil, err
			}
			return q, nil
		}
		select {
		case <-done:
			return nil, errors.New("qemu exited")
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

type qmpError struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (q *qmpClient) readReply() (json.RawMessage, error) {
	for {
		_ = q.conn.SetReadDeadline(time.Now().Add(60 * time.Second))
		line, err := q.r.ReadBytes('\n')
		if err != nil {
			return nil, err
		}
		var msg struct {
			QMP    json.RawMessage `json:"QMP"`
			Return json.RawMessage `json:"return"`
			Error  *qmpError       `json:"error"`
			Event  string          `json:"event"`
		}
		if err := json.Unmarshal(line, &msg); err != nil {
			return nil, fmt.Errorf("bad qmp message: %w", err)
		}
		switch {
		case msg.Event != "":
			continue
		case msg.Error != nil:
			return nil, fmt.Errorf("qmp: %s: %s", msg.Error.Class, msg.Error.Desc)
		case msg.QMP != nil:
			return msg.QMP, nil
		}
		return msg.Return, nil
	}
}

// do runs one command and returns its "return" value.
func (q *qmpClient) do(cmd string, args any) (json.RawMessage, error) {
	return q.doFile(cmd, args, nil)
}

// doFile runs one command, passing f along with it (SCM_RIGHTS), as
// getfd needs.
func (q *qmpClient) doFile(cmd string, args any, f *os.File) (json.RawMessage, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	b = append(b, '\n')
	if f != nil {
		if _, _, err := q.conn.WriteMsgUnix(b, syscall.UnixRights(int(f.Fd())), nil); err != nil {
			return nil, err
		}
	} else if _, err := q.conn.Write(b); err != nil {
		return nil, err
	}
	return q.readReply()
}

// status returns the VM's run state ("running", "paused", "inmigrate", ...).
func (q *qmpClient) status() (string, error) {
	raw, err := q.do("query-status", nil)
	if err != nil {
		return "", err
	}
	var st struct {
		Status string `json:"status"`
	}
	err = json.Unmarshal(raw, &st)
	return st.Status, err
}

func (q *qmpClient) close() { q.conn.Close() }
