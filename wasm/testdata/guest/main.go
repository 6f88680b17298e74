// Command guest is the Go (GOOS=wasip1) test program of the WASM tier's
// tests and corpus: argv[1] picks what it does.
package main

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Println("hello from wasm")
		return
	}
	arg := func(i int) string {
		if len(os.Args) > i {
			return os.Args[i]
		}
		return ""
	}
	switch os.Args[1] {
	case "hello":
		fmt.Println("hello from wasm")
	case "args":
		fmt.Println(strings.Join(os.Args[1:], " "))
	case "stdin":
		_, _ = io.Copy(os.Stdout, os.Stdin)
	case "exit":
		n, _ := strconv.Atoi(arg(2))
		fmt.Println("exiting with", n)
		os.Exit(n)
	case "time":
		// Two clock reads and a random number: pinned and seeded, so two
		// runs print the same bytes.
		t1 := time.Now()
		t2 := time.Now()
		var b [8]byte
		_, _ = rand.Read(b[:])
		fmt.Printf("%s %s %d\n", t1.UTC().Format(time.RFC3339Nano), t2.UTC().Format(time.RFC3339Nano), binary.LittleEndian.Uint64(b[:]))
	case "gate":
		// Streaming: a line, then a bounded wait for the file argv[2]
		// (which the test creates once the line reached it), then another.
		fmt.Println("first")
		fmt.Fprintln(os.Stderr, "note")
		for i := 0; i < 5_000_000; i++ {
			if _, err := os.Stat(arg(2)); err == nil {
				break
			}
		}
		fmt.Println("second")
	case "sleep":
		t1 := time.Now()
		time.Sleep(time.Hour)
		fmt.Println(time.Since(t1).Round(time.Second))
	case "env":
		fmt.Println(strings.Join(os.Environ(), "\n"))
		fmt.Println("canary:", os.Getenv(arg(2)))
	case "read":
		b, err := os.ReadFile(arg(2))
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Print(string(b))
	case "ls":
		entries, err := os.ReadDir(arg(2))
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		for _, e := range entries {
			fmt.Println(e.Name())
		}
	case "write":
		// write NAME TEXT, then read it back.
		if err := os.WriteFile(arg(2), []byte(arg(3)), 0o644); err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		b, err := os.ReadFile(arg(2))
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(string(b))
	case "flood":
		w := bufio.NewWriter(os.Stdout)
		for {
			if _, err := w.WriteString("flood flood flood flood flood flood flood flood\n"); err != nil {
				os.Exit(3)
			}
		}
	case "spin":
		for {
		}
	case "alloc":
		var keep [][]byte
		for i := 0; ; i++ {
			keep = append(keep, make([]byte, 1<<20))
			keep[i][0] = 1
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", os.Args[1])
		os.Exit(2)
	}
}
