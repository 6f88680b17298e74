;; The loop is in the start section, which runs during instantiation,
;; before the host ever calls an export.
(module
  (func $spin (loop $l (br $l)))
  (start $spin)
  (func (export "_start")))
