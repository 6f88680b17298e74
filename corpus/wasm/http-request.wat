;; Sends its whole input (stdin for a tier job) as the request JSON of
;; airlock's http_request host function and writes the response JSON to its
;; output (stdout for a tier job).
(module
  (import "airlock" "input_size" (func $isize (result i32)))
  (import "airlock" "input_read" (func $iread (param i32)))
  (import "airlock" "http_request" (func $http (param i32 i32) (result i32)))
  (import "airlock" "result_read" (func $rread (param i32)))
  (import "airlock" "output_write" (func $out (param i32 i32)))
  (memory 4)
  (func (export "req") (result i32) (local $n i32)
    (call $iread (i32.const 0))
    (local.set $n (call $http (i32.const 0) (call $isize)))
    (call $rread (i32.const 65536))
    (call $out (i32.const 65536) (local.get $n))
    (i32.const 0)))
