;; Reads the wall clock twice and returns the first reading's seconds and
;; nanoseconds, and the difference between the readings in nanoseconds.
;; Pinned clocks make all three exact: the job's clock plus one tick per
;; read.
(module
  (import "wasi_snapshot_preview1" "clock_time_get" (func $now (param i32 i64 i32) (result i32)))
  (memory 1)
  (func (export "reads") (result i64 i64 i64)
    (drop (call $now (i32.const 0) (i64.const 1) (i32.const 0)))
    (drop (call $now (i32.const 0) (i64.const 1) (i32.const 8)))
    (i64.div_u (i64.load (i32.const 0)) (i64.const 1000000000))
    (i64.rem_u (i64.load (i32.const 0)) (i64.const 1000000000))
    (i64.sub (i64.load (i32.const 8)) (i64.load (i32.const 0)))))
