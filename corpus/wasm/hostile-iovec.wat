;; WASI calls with hostile pointers and lengths: iovec counts and lengths
;; that wrap around 32 bits, buffers that run past the end of memory,
;; huge path lengths. Each must fail with an errno (the guest prints the
;; errnos it got), never crash or hang the host.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open" (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get" (func $args_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 1)
  (func $sum (param $acc i32) (param $e i32) (result i32)
    ;; count the calls that returned an errno
    (i32.add (local.get $acc) (i32.ne (local.get $e) (i32.const 0))))
  (func (export "_start") (local $n i32)
    ;; iovec at 0: buf 0xfffffff0, len 0xffffffff
    (i32.store (i32.const 0) (i32.const 0xfffffff0))
    (i32.store (i32.const 4) (i32.const 0xffffffff))
    ;; iovec at 8: buf 16, len 0x7fffffff (second iovec making the sum wrap)
    (i32.store (i32.const 8) (i32.const 16))
    (i32.store (i32.const 12) (i32.const 0x7fffffff))
    (local.set $n (call $sum (local.get $n) (call $fd_write (i32.const 1) (i32.const 0) (i32.const 2) (i32.const 100))))
    (local.set $n (call $sum (local.get $n) (call $fd_write (i32.const 1) (i32.const 0) (i32.const 0xffffffff) (i32.const 100))))
    (local.set $n (call $sum (local.get $n) (call $fd_write (i32.const 1) (i32.const 0xfffffffc) (i32.const 1) (i32.const 100))))
    (local.set $n (call $sum (local.get $n) (call $fd_write (i32.const 1) (i32.const 8) (i32.const 1) (i32.const 0xfffffffe))))
    (local.set $n (call $sum (local.get $n) (call $fd_read (i32.const 0) (i32.const 0) (i32.const 2) (i32.const 100))))
    (local.set $n (call $sum (local.get $n) (call $random_get (i32.const 16) (i32.const 0xffffffff))))
    (local.set $n (call $sum (local.get $n) (call $random_get (i32.const 0xffffffff) (i32.const 2))))
    (local.set $n (call $sum (local.get $n) (call $path_open (i32.const 3) (i32.const 0) (i32.const 16) (i32.const 0xffffffff) (i32.const 0) (i64.const -1) (i64.const -1) (i32.const 0) (i32.const 100))))
    (local.set $n (call $sum (local.get $n) (call $args_get (i32.const 0xfffffff0) (i32.const 0xfffffff0))))
    ;; exit with the number of calls that failed: all nine must have
    (call $proc_exit (local.get $n))))
