;; Opens ok.txt in the first preopen (fd 3) again and again without closing
;; it, up to 100000 times or until path_open fails; returns how many
;; opens succeeded. Every open of a granted host file holds a descriptor
;; of the airlock process, and every open holds memory: a run may hold a
;; bounded number open at once.
(module
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "ok.txt")
  (func (export "open") (result i32)
    (local $n i32)
    (block $done
      (loop $more
        (br_if $done (i32.ge_u (local.get $n) (i32.const 100000)))
        ;; fd 3, no lookup flags, "ok.txt", no oflags, read rights, fd written at 16
        (br_if $done (call $path_open (i32.const 3) (i32.const 0) (i32.const 0) (i32.const 6)
          (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 16)))
        (local.set $n (i32.add (local.get $n) (i32.const 1)))
        (br $more)))
    (local.get $n)))
