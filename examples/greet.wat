;; greet: a plugin for `airlock call`. Its function greet reads the call's
;; input (JSON), logs a line through the host's log function (the "log"
;; grant) and answers {"greeting": "hello", "input": INPUT}.
;; `wat2wasm greet.wat -o greet.wasm` builds greet.wasm.
(module
  (import "airlock" "input_size" (func $input_size (result i32)))
  (import "airlock" "input_read" (func $input_read (param i32)))
  (import "airlock" "output_write" (func $output_write (param i32 i32)))
  (import "airlock" "log" (func $log (param i32 i32)))
  (memory (export "memory") 2)
  ;; 0: the log line; 64: the answer's head; 128: its tail; 1024: the input.
  (data (i32.const 0) "greet: called")
  (data (i32.const 64) "{\"greeting\": \"hello\", \"input\": ")
  (data (i32.const 128) "}\n")

  (func (export "greet") (result i32) (local $n i32)
    (local.set $n (call $input_size))
    ;; The input must fit the memory past offset 1024 (two 64 KiB pages).
    (if (i32.gt_u (local.get $n) (i32.const 130048))
      (then (return (i32.const 1))))
    (call $input_read (i32.const 1024))
    ;; A file's final newline is not part of the value.
    (if (i32.and (i32.gt_u (local.get $n) (i32.const 0))
                 (i32.eq (i32.load8_u (i32.add (i32.const 1023) (local.get $n))) (i32.const 10)))
      (then (local.set $n (i32.sub (local.get $n) (i32.const 1)))))
    (call $log (i32.const 0) (i32.const 13))
    (call $output_write (i32.const 64) (i32.const 31))
    (call $output_write (i32.const 1024) (local.get $n))
    (call $output_write (i32.const 128) (i32.const 2))
    (i32.const 0))
)
