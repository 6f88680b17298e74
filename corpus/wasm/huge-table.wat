;; Declares a table of four billion references (32 GB): refused before
;; anything is allocated.
(module
  (table 4000000000 funcref)
  (func (export "_start")))
