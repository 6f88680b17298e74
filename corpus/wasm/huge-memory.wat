;; Declares a 4 GiB minimum memory: refused before anything is allocated.
(module
  (memory 65536)
  (func (export "_start")))
