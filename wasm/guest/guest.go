//go:build wasip1

// Package guest is the guest side of airlock's plugin ABI for tools
// written in Go. Build a tool as a WASI reactor:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o tool.wasm .
//
// and export each callable function with //go:wasmexport, taking no
// arguments and returning an int32 status (0 for success). The host runs
// every call in a fresh instance: globals do not survive between calls;
// use the key-value store of a session for that.
//
// The host functions live in the import module "airlock"; input_size,
// input_read, output_write and result_read are always available, log,
// http_request and the kv_* functions only when the host granted them
// (calling one that was not granted ends the call with a denial).
package guest

import (
	"encoding/json"
	"errors"
	"unsafe"
)

//go:wasmimport airlock input_size
func inputSize() uint32

//go:wasmimport airlock input_read
func inputRead(ptr unsafe.Pointer)

//go:wasmimport airlock output_write
func outputWrite(ptr unsafe.Pointer, n uint32)

//go:wasmimport airlock result_read
func resultRead(ptr unsafe.Pointer)

//go:wasmimport airlock log
func hostLog(ptr unsafe.Pointer, n uint32)

//go:wasmimport airlock http_request
func httpRequest(ptr unsafe.Pointer, n uint32) uint32

//go:wasmimport airlock kv_get
func kvGet(kptr unsafe.Pointer, klen uint32) int32

//go:wasmimport airlock kv_set
func kvSet(kptr unsafe.Pointer, klen uint32, vptr unsafe.Pointer, vlen uint32) int32

//go:wasmimport airlock kv_delete
func kvDelete(kptr unsafe.Pointer, klen uint32)

func ptr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

func result(n uint32) []byte {
	b := make([]byte, n)
	if n > 0 {
		resultRead(ptr(b))
	}
	return b
}

// Input returns the bytes the host passed to this call.
func Input() []byte {
	b := make([]byte, inputSize())
	if len(b) > 0 {
		inputRead(ptr(b))
	}
	return b
}

// Output appends b to the call's output.
func Output(b []byte) { outputWrite(ptr(b), uint32(len(b))) }

// Log sends one message to the host's log (needs the "log" grant).
func Log(msg string) {
	b := []byte(msg)
	hostLog(ptr(b), uint32(len(b)))
}

// ErrFull is returned by KVSet when the session's store is full.
var ErrFull = errors.New("key-value store is full")

// KVGet returns the value stored under key in the session's store (needs
// the "kv" grant and a session).
func KVGet(key string) ([]byte, bool) {
	k := []byte(key)
	n := kvGet(ptr(k), uint32(len(k)))
	if n < 0 {
		return nil, false
	}
	return result(uint32(n)), true
}

// KVSet stores val under key.
func KVSet(key string, val []byte) error {
	k := []byte(key)
	if kvSet(ptr(k), uint32(len(k)), ptr(val), uint32(len(val))) != 0 {
		return ErrFull
	}
	return nil
}

// KVDelete removes key.
func KVDelete(key string) {
	k := []byte(key)
	kvDelete(ptr(k), uint32(len(k)))
}

// Request is an HTTP request; Body is base64 in the JSON the host sees.
type Request struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    []byte            `json:"body,omitempty"`
}

// Response is the host's answer to a Request.
type Response struct {
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    []byte            `json:"body,omitempty"`
}

// HTTP sends req through the host's egress policy (needs the
// "http_request" grant and the request's host in the tool's network
// grants; a refusal ends the call with a denial).
func HTTP(req Request) (Response, error) {
	var resp Response
	b, err := json.Marshal(req)
	if err != nil {
		return resp, err
	}
	n := httpRequest(ptr(b), uint32(len(b)))
	err = json.Unmarshal(result(n), &resp)
	return resp, err
}
