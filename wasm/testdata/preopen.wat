;; preopen does what wasi-libc does at start: it asks for the first
;; preopen's name (descriptor 3), then opens "hello.txt" relative to it.
;; It writes the name, a newline and the file's contents to stdout, or
;; exits with the failing call's errno.
(module
  (import "wasi_snapshot_preview1" "fd_prestat_get"
    (func $fd_prestat_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_prestat_dir_name"
    (func $fd_prestat_dir_name (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read"
    (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 1)
  ;; 0: prestat; 16: iovec; 24: count; 28: opened fd; 32: "hello.txt";
  ;; 64: newline; 256: the preopen's name; 1024: the file's contents.
  (data (i32.const 32) "hello.txt")
  (data (i32.const 64) "\n")
  (func $check (param $errno i32)
    (if (local.get $errno) (then (call $proc_exit (local.get $errno)))))
  (func $out (param $ptr i32) (param $len i32)
    (i32.store (i32.const 16) (local.get $ptr))
    (i32.store (i32.const 20) (local.get $len))
    (call $check (call $fd_write (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 24))))
  (func (export "_start") (local $n i32)
    (call $check (call $fd_prestat_get (i32.const 3) (i32.const 0)))
    (local.set $n (i32.load (i32.const 4)))
    (call $check (call $fd_prestat_dir_name (i32.const 3) (i32.const 256) (local.get $n)))
    (call $out (i32.const 256) (local.get $n))
    (call $out (i32.const 64) (i32.const 1))
    ;; fd_read right (2) only.
    (call $check (call $path_open (i32.const 3) (i32.const 0) (i32.const 32) (i32.const 9)
      (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 28)))
    (i32.store (i32.const 16) (i32.const 1024))
    (i32.store (i32.const 20) (i32.const 1024))
    (call $check (call $fd_read (i32.load (i32.const 28)) (i32.const 16) (i32.const 1) (i32.const 24)))
    (call $out (i32.const 1024) (i32.load (i32.const 24)))))
