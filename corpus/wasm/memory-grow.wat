;; Grows linear memory one page at a time until memory.grow fails, and
;; returns the number of pages it got: the job's memory_mb times 16.
(module
  (memory 1)
  (func (export "grow") (result i32)
    (block $done
      (loop $more
        (br_if $done (i32.eq (memory.grow (i32.const 1)) (i32.const -1)))
        (br $more)))
    (memory.size)))
