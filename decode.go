package airlock

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/value"
)

// DecodeJob decodes one job in the v1 wire format, strictly: unknown
// fields (names are matched exactly), a field given twice, wrong types,
// trailing data and payloads over 32 MiB are
// [*InvalidJob] errors naming the field. Integral numbers in input become
// integers (int64, or *big.Int beyond it).
func DecodeJob(data []byte) (Job, error) {
	var job Job
	var w jobWire
	if len(data) > value.MaxJobBytes {
		return job, invalid("", "job is larger than %d bytes", value.MaxJobBytes)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return job, invalid("", "empty input (want a JSON job object)")
	}
	if !utf8.Valid(data) {
		// encoding/json would replace each bad byte with U+FFFD: the job
		// would run with other bytes than the ones sent.
		return job, invalid("", "not UTF-8 text (at byte %d); JSON is UTF-8, and other bytes go in base64", firstInvalid(data))
	}
	if what := notObject(trimmed); what != "" {
		// null would decode as an empty job, and the others' errors name
		// Go types.
		return job, invalid("", "want a JSON job object {\"kind\": ...}, not %s", what)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&w); err != nil {
		return Job{}, decodeError(err)
	}
	job = w.job()
	if dec.More() {
		return Job{}, invalid("", "trailing data after the job object")
	}
	if tok, err := dec.Token(); err != io.EOF {
		if err != nil {
			return Job{}, invalid("", "trailing data after the job object: %s", strings.TrimPrefix(err.Error(), "json: "))
		}
		return Job{}, invalid("", "trailing data after the job object (%v)", tok)
	}
	if err := checkKeys(data); err != nil {
		return Job{}, err
	}
	if job.Input != nil {
		in, err := value.Normalize(job.Input)
		if err != nil {
			return Job{}, invalid("input", "%s", err.Error())
		}
		job.Input = in.(map[string]any)
	}
	return job, nil
}

func decodeError(err error) error {
	var (
		typeErr *json.UnmarshalTypeError
		synErr  *json.SyntaxError
		timeErr *time.ParseError
		b64Err  base64.CorruptInputError
	)
	var inv *InvalidJob
	switch {
	case errors.As(err, &inv):
		return inv
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "(top level)"
		}
		return invalid(field, "wrong type: got JSON %s, want %s", typeErr.Value, typeName(typeErr.Type))
	case errors.As(err, &synErr):
		return invalid("", "malformed JSON at byte %d: %s", synErr.Offset, synErr.Error())
	case errors.As(err, &timeErr):
		return invalid("clock", "%q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", timeErr.Value)
	case errors.As(err, &b64Err):
		return invalid("module", "want base64: %s", b64Err.Error())
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("", "truncated JSON")
	}
	msg := err.Error()
	if strings.HasPrefix(msg, "Time.UnmarshalJSON") {
		// time.Time's own decoder names no field; clock is the job's only time.
		return invalid("clock", "wrong type: want an RFC 3339 time string such as \"2026-01-02T15:04:05Z\"")
	}
	if name, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return invalid(strings.Trim(name, `"`), "unknown field")
	}
	return invalid("", "%s", strings.TrimPrefix(msg, "json: "))
}

// firstInvalid is the offset of the first byte of data that is not part
// of valid UTF-8.
func firstInvalid(data []byte) int {
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(data)
}

// notObject names the JSON value data holds when it is not an object, or
// returns "".
func notObject(data []byte) string {
	switch b := data[0]; {
	case b == '{':
		return ""
	case b == '[':
		return "an array"
	case b == '"':
		return "a string"
	case b == '-' || (b >= '0' && b <= '9'):
		return "a number"
	}
	switch string(data) {
	case "null":
		return "null"
	case "true", "false":
		return "a boolean"
	}
	return "malformed JSON"
}

// typeName is what the wire wants where a Go value of type t goes, in
// JSON's words.
func typeName(t reflect.Type) string {
	switch t.String() {
	case "string", "airlock.Kind", "airlock.Situation", "airlock.Lifecycle":
		return "a string"
	case "int64", "int", "uint64":
		return "an integer"
	case "bool":
		return "a boolean"
	case "[]string":
		return "an array of strings"
	case "[]uint8":
		return "a base64 string"
	case "map[string]string", "airlock.filesWire":
		return "an object of strings"
	case "map[string]interface {}":
		return "an object"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}
