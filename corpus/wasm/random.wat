;; Returns four bytes of random_get as an unsigned integer: fixed by the
;; job's seed.
(module
  (import "wasi_snapshot_preview1" "random_get" (func $random (param i32 i32) (result i32)))
  (memory 1)
  (func (export "rand") (result i64)
    (drop (call $random (i32.const 0) (i32.const 4)))
    (i64.load32_u (i32.const 0))))
