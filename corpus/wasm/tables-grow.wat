;; Four tables without a maximum, each grown by 100000 references until
;; table.grow fails; returns the sum of their sizes. The tables of a module
;; share one cap, so the sum stops where a single table would.
(module
  (table $t0 0 funcref)
  (table $t1 0 funcref)
  (table $t2 0 funcref)
  (table $t3 0 funcref)
  (func (export "grow") (result i32)
    (block $done0
      (loop $more0
        (br_if $done0 (i32.eq (table.grow $t0 (ref.null func) (i32.const 100000)) (i32.const -1)))
        (br $more0)))
    (block $done1
      (loop $more1
        (br_if $done1 (i32.eq (table.grow $t1 (ref.null func) (i32.const 100000)) (i32.const -1)))
        (br $more1)))
    (block $done2
      (loop $more2
        (br_if $done2 (i32.eq (table.grow $t2 (ref.null func) (i32.const 100000)) (i32.const -1)))
        (br $more2)))
    (block $done3
      (loop $more3
        (br_if $done3 (i32.eq (table.grow $t3 (ref.null func) (i32.const 100000)) (i32.const -1)))
        (br $more3)))
    (i32.add (i32.add (table.size $t0) (table.size $t1)) (i32.add (table.size $t2) (table.size $t3)))))
