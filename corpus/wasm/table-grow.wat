;; A table without a maximum, grown by 100000 references until table.grow
;; fails; returns the size reached. wazero alone would allow 2^32 - 1.
(module
  (table $t 0 funcref)
  (func (export "grow") (result i32)
    (block $done
      (loop $more
        (br_if $done (i32.eq (table.grow $t (ref.null func) (i32.const 100000)) (i32.const -1)))
        (br $more)))
    (table.size $t)))
