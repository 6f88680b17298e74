;; A recursion as deep as its argument, returning the depth: benign code
;; that the call stack's budget must leave alone.
(module
  (func $depth (export "depth") (param i64) (result i64)
    (if (result i64) (i64.eqz (local.get 0))
      (then (i64.const 0))
      (else (i64.add (call $depth (i64.sub (local.get 0) (i64.const 1))) (i64.const 1))))))
