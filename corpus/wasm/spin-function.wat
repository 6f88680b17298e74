;; An exported function that loops forever with no calls inside the loop:
;; only wazero's close-on-context-done checks stop it.
(module
  (func $spin (export "spin") (loop $l (br $l)))
  (func (export "_start") (call $spin)))
