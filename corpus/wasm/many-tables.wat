;; Sixteen tables of a million references each: every one is within the
;; per-table cap, but together they are 16 million references (128 MB,
;; allocated at instantiation). The tables of a module share one cap.
(module
  (table 1000000 funcref)
  (table 1000000 funcref)
  (table 1000000 funcref)
  (table 1000000 funcref)
  (table 1000000 funcref)
  (table 1000000 funcref)
  (table 1000000 funcref)
  (table 1000000 funcref)
  (table 1000000 funcref)
  (table 1000000 funcref)
  (table 1000000 funcref)
  (table 1000000 funcref)
  (table 1000000 funcref)
  (table 1000000 funcref)
  (table 1000000 funcref)
  (table 1000000 funcref)
  (func (export "_start")))
