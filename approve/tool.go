package approve

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// OfToolCall returns the digest of a call of the MCP tool named tool, with
// args, on the wrapped server started as argv (see airlock mcp-wrap). The
// arguments are canonical JSON first (object keys sorted, numbers as
// written, no insignificant space), so an approval holds for exactly these
// arguments however a client spells them; absent arguments are {}.
func OfToolCall(argv []string, tool string, args json.RawMessage) (Digest, error) {
	canon, err := CanonicalJSON(args)
	if err != nil {
		return "", err
	}
	c := newCanonical()
	c.str("airlock-mcp-tool-v1", "")
	c.strs("server", argv)
	c.str("tool", tool)
	c.str("arguments", string(canon))
	return c.sum(), nil
}

// CanonicalJSON re-encodes a JSON value with sorted object keys and
// numbers as written; empty input or null is {}.
func CanonicalJSON(raw json.RawMessage) ([]byte, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return []byte("{}"), nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("arguments: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("arguments: more than one JSON value")
	}
	return json.Marshal(v)
}
