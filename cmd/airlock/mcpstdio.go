//go:build !lean

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stdioTransport is MCP over r and w as newline-delimited JSON, like the
// SDK's IOTransport, except that a line the SDK would end the whole
// session over is answered with a JSON-RPC error and the session goes on:
// malformed JSON, two values on a line, nesting deeper than the SDK
// decodes, a batch, or a line longer than maxLine bytes (whose rest is
// skipped). Tool arguments are the model's to write; one bad call must not
// take the agent's tools away.
func stdioTransport(r io.Reader, w io.Writer, maxLine int) mcp.Transport {
	pr, pw := io.Pipe()
	out := &lockedWriter{w: w}
	go func() {
		br := bufio.NewReaderSize(r, 64<<10)
		for {
			line, tooLong, err := readBoundedLine(br, maxLine)
			switch {
			case tooLong:
				out.refuse(nil, fmt.Sprintf("message larger than %d bytes", maxLine))
			case len(bytes.TrimSpace(line)) == 0:
			default:
				if msg := checkFrame(line); msg != "" {
					out.refuse(frameID(line), msg)
				} else if _, werr := pw.Write(append(line, '\n')); werr != nil {
					return // the session ended
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				pw.CloseWithError(err)
				return
			}
		}
	}()
	return &mcp.IOTransport{Reader: pr, Writer: nopWriteCloser{out}, MaxLineLength: maxLine + 1}
}

// readBoundedLine reads one line without its newline; a line longer than
// max is consumed to its end and reported as tooLong, without its bytes.
func readBoundedLine(br *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max+1 { // +1: the newline
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), tooLong, err
	}
}

// checkFrame says why the SDK could not take line as one message, or "".
func checkFrame(line []byte) string {
	if !json.Valid(line) {
		return "parse error: not one JSON value"
	}
	if bytes.HasPrefix(bytes.TrimSpace(line), []byte("[")) {
		return "invalid request: batches are not supported"
	}
	if _, err := jsonrpc.DecodeMessage(line); err != nil {
		return "invalid request: " + err.Error()
	}
	return ""
}

// frameID is the id of the request line carries, if it can be read.
func frameID(line []byte) any {
	var m struct {
		ID any `json:"id"`
	}
	if json.Unmarshal(line, &m) != nil {
		return nil
	}
	switch m.ID.(type) {
	case string, float64:
		return m.ID
	}
	return nil
}

// lockedWriter writes whole messages, the SDK's and the refusals, one at
// a time.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) refuse(id any, msg string) {
	code := -32600 // invalid request
	if bytes.HasPrefix([]byte(msg), []byte("parse error")) {
		code = -32700
	}
	data, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": code, "message": msg}})
	_, _ = l.Write(append(data, '\n'))
}
