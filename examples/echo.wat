;; echo: a WASI command that prints its arguments (after the program name),
;; separated by spaces and ended by a newline, then copies its stdin to its
;; stdout. `wat2wasm echo.wat -o echo.wasm` builds echo.wasm.
(module
  (import "wasi_snapshot_preview1" "args_sizes_get"
    (func $args_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get"
    (func $args_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read"
    (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  ;; 0: argc; 4: argv buffer size; 8: an iovec {ptr, len}; 16: bytes done;
  ;; 20: " "; 21: "\n"; 1024: argv pointers; 4096: argv strings;
  ;; 65536: the stdin buffer (64 KiB).
  (data (i32.const 20) " \n")

  ;; $write writes len bytes at ptr to stdout.
  (func $write (param $ptr i32) (param $len i32)
    (i32.store (i32.const 8) (local.get $ptr))
    (i32.store (i32.const 12) (local.get $len))
    (drop (call $fd_write (i32.const 1) (i32.const 8) (i32.const 1) (i32.const 16))))

  ;; $strlen is the length of the NUL-terminated string at p.
  (func $strlen (param $p i32) (result i32) (local $n i32)
    (block $end
      (loop $scan
        (br_if $end (i32.eqz (i32.load8_u (i32.add (local.get $p) (local.get $n)))))
        (local.set $n (i32.add (local.get $n) (i32.const 1)))
        (br $scan)))
    (local.get $n))

  (func (export "_start") (local $i i32) (local $arg i32) (local $n i32)
    (drop (call $args_sizes_get (i32.const 0) (i32.const 4)))
    (drop (call $args_get (i32.const 1024) (i32.const 4096)))
    (local.set $i (i32.const 1))
    (block $args_done
      (loop $args
        (br_if $args_done (i32.ge_u (local.get $i) (i32.load (i32.const 0))))
        (if (i32.gt_u (local.get $i) (i32.const 1))
          (then (call $write (i32.const 20) (i32.const 1))))
        (local.set $arg (i32.load (i32.add (i32.const 1024) (i32.shl (local.get $i) (i32.const 2)))))
        (call $write (local.get $arg) (call $strlen (local.get $arg)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $args)))
    (call $write (i32.const 21) (i32.const 1))
    (block $eof
      (loop $copy
        (i32.store (i32.const 8) (i32.const 65536))
        (i32.store (i32.const 12) (i32.const 65536))
        (br_if $eof (call $fd_read (i32.const 0) (i32.const 8) (i32.const 1) (i32.const 16)))
        (local.set $n (i32.load (i32.const 16)))
        (br_if $eof (i32.eqz (local.get $n)))
        (call $write (i32.const 65536) (local.get $n))
        (br $copy))))
)
