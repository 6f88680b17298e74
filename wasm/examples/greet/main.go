//go:build wasip1

// Command greet is a complete example of an airlock WASM tool written in
// Go. Build it as a reactor:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o greet.wasm ./wasm/examples/greet
//
// and call it from a Go program with wasm.Host (see the package's tests)
// or from the command line:
//
//	airlock call greet.wasm greet --input @name.txt --grant log,kv
package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/wasm/guest"
)

// greet answers "hello, NAME (call N)", counting calls in the session's
// key-value store. It needs the "log" and "kv" grants.
//
//go:wasmexport greet
func greet() int32 {
	name := strings.TrimSpace(string(guest.Input()))
	if name == "" {
		guest.Output([]byte("no name given"))
		return 1
	}
	guest.Log("greeting " + name)
	n := 1
	if v, ok := guest.KVGet("calls"); ok {
		prev, _ := strconv.Atoi(string(v))
		n = prev + 1
	}
	if err := guest.KVSet("calls", []byte(strconv.Itoa(n))); err != nil {
		guest.Log("could not count: " + err.Error())
	}
	guest.Output(fmt.Appendf(nil, "hello, %s (call %d)", name, n))
	return 0
}

// fetch GETs the URL given as input and returns the response's status
// and body. It needs the "http_request" grant and the URL's host in the
// tool's network grants.
//
//go:wasmexport fetch
func fetch() int32 {
	resp, err := guest.HTTP(guest.Request{Method: "GET", URL: strings.TrimSpace(string(guest.Input()))})
	if err != nil {
		guest.Output([]byte(err.Error()))
		return 1
	}
	guest.Output(fmt.Appendf(nil, "%d %s", resp.Status, resp.Body))
	return 0
}

// upper needs no grant: it upper-cases its input.
//
//go:wasmexport upper
func upper() int32 {
	guest.Output([]byte(strings.ToUpper(string(guest.Input()))))
	return 0
}

func main() {}
