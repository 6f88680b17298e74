;; wasiprobe calls WASI preview 1 path functions directly and returns their
;; errno, so that tests see exactly what a guest sees (libc wrappers would
;; translate or pre-check). Each export reads its paths from stdin: the
;; first path, then optionally a newline and a second path. Files are
;; opened for reading only (the fd_read right). Descriptor 3 is
;; the first preopen (the scratch at "/").
(module
  (import "wasi_snapshot_preview1" "fd_read"
    (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_filestat_get"
    (func $path_filestat_get (param i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_unlink_file"
    (func $path_unlink_file (param i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_link"
    (func $path_link (param i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_symlink"
    (func $path_symlink (param i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_readlink"
    (func $path_readlink (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  ;; 0: iovec {1024, 1024}; 8: bytes read; 12: opened fd; 16: "."
  ;; 256: filestat buffer; 320: readlink's length; 512: readlink's buffer;
  ;; 1024: stdin.
  (data (i32.const 0) "\00\04\00\00\00\04\00\00")
  (data (i32.const 16) ".")
  (global $p1 (mut i32) (i32.const 1024))
  (global $n1 (mut i32) (i32.const 0))
  (global $p2 (mut i32) (i32.const 1024))
  (global $n2 (mut i32) (i32.const 0))

  ;; $paths reads stdin and splits it at the first newline.
  (func $paths (local $end i32) (local $i i32)
    (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
    (local.set $end (i32.add (i32.const 1024) (i32.load (i32.const 8))))
    (local.set $i (i32.const 1024))
    (block $done
      (loop $scan
        (br_if $done (i32.ge_u (local.get $i) (local.get $end)))
        (br_if $done (i32.eq (i32.load8_u (local.get $i)) (i32.const 10)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $scan)))
    (global.set $n1 (i32.sub (local.get $i) (i32.const 1024)))
    (if (i32.lt_u (local.get $i) (local.get $end))
      (then
        (global.set $p2 (i32.add (local.get $i) (i32.const 1)))
        (global.set $n2 (i32.sub (local.get $end) (global.get $p2))))))

  ;; open(oflags): path_open of the first path from descriptor 3.
  (func (export "open") (param $oflags i32) (result i32)
    (call $paths)
    (call $path_open (i32.const 3) (i32.const 0) (global.get $p1) (global.get $n1)
      (local.get $oflags) (i64.const 2) (i64.const 2) (i32.const 0) (i32.const 12)))

  ;; open_in_dot(oflags): opens "." from descriptor 3, then the first path
  ;; from that descriptor; 1000 + errno if the first open fails.
  (func (export "open_in_dot") (param $oflags i32) (result i32) (local $e i32)
    (call $paths)
    (local.set $e (call $path_open (i32.const 3) (i32.const 0) (i32.const 16) (i32.const 1)
      (i32.const 2) (i64.const 2) (i64.const 2) (i32.const 0) (i32.const 12)))
    (if (local.get $e) (then (return (i32.add (i32.const 1000) (local.get $e)))))
    (call $path_open (i32.load (i32.const 12)) (i32.const 0) (global.get $p1) (global.get $n1)
      (local.get $oflags) (i64.const 2) (i64.const 2) (i32.const 0) (i32.const 12)))

  ;; stat(): path_filestat_get of the first path.
  (func (export "stat") (result i32)
    (call $paths)
    (call $path_filestat_get (i32.const 3) (i32.const 0) (global.get $p1) (global.get $n1) (i32.const 256)))

  ;; unlink(): path_unlink_file of the first path, then path_filestat_get of
  ;; the second: 100 * the first errno + the second.
  (func (export "unlink") (result i32) (local $e i32)
    (call $paths)
    (local.set $e (call $path_unlink_file (i32.const 3) (global.get $p1) (global.get $n1)))
    (i32.add (i32.mul (local.get $e) (i32.const 100))
      (call $path_filestat_get (i32.const 3) (i32.const 0) (global.get $p2) (global.get $n2) (i32.const 256))))

  ;; link(oldfd, newfd): path_link from the first path to the second.
  (func (export "link") (param $old i32) (param $new i32) (result i32)
    (call $paths)
    (call $path_link (local.get $old) (i32.const 0) (global.get $p1) (global.get $n1)
      (local.get $new) (global.get $p2) (global.get $n2)))

  ;; symlink(fd): path_symlink with the first path as the target and the
  ;; second as the link.
  (func (export "symlink") (param $fd i32) (result i32)
    (call $paths)
    (call $path_symlink (global.get $p1) (global.get $n1) (local.get $fd) (global.get $p2) (global.get $n2)))

  ;; readlink(): path_readlink of the first path.
  (func (export "readlink") (result i32)
    (call $paths)
    (call $path_readlink (i32.const 3) (global.get $p1) (global.get $n1) (i32.const 512) (i32.const 256) (i32.const 320))))
