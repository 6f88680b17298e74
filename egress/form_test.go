package egress

import (
	"strings"
	"testing"
	"time"
)

// TestPartHeadersAnyBytes: the scan for part headers in a multipart body
// keeps its place whatever the bytes before a header (invalid UTF-8, and
// letters whose lower case is longer or shorter in UTF-8: U+023A, the
// Kelvin sign), reads a Content-ID's value across a line break as Rack
// does, and takes linear time on the shapes that once took quadratic time
// (many headers on one line, many folded lines), at the size a request
// body may have.
func TestPartHeadersAnyBytes(t *testing.T) {
	for _, pre := range []string{strings.Repeat("\xff", 100), strings.Repeat("Ⱥ", 100), strings.Repeat("K", 100)} {
		if !partHeadersName([]byte(pre + "\r\nContent-ID: _method\r\n")) {
			t.Errorf("a Content-ID naming _method after %.6q... not found", pre)
		}
		if partHeadersName([]byte(pre + "content-id: x\r\n")) {
			t.Errorf("a Content-ID naming x after %.6q... taken for _method", pre)
		}
	}
	if !partHeadersName([]byte("--b\r\nContent-ID:\r\n _method\r\n\r\nDELETE\r\n--b--\r\n")) {
		t.Error("a Content-ID whose value follows a line break not found")
	}
	for name, body := range map[string]string{
		"headers on one line": strings.Repeat("content-id:", DefaultMaxRequestBytes/11),
		"folded lines":        strings.Repeat("a\n ", DefaultMaxRequestBytes/3),
	} {
		done := make(chan struct{})
		go func() {
			partHeadersName([]byte(body))
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(time.Minute):
			// A linear scan of 10 MiB takes well under a second; the
			// quadratic one took about 40 minutes.
			t.Fatalf("%s: scanning %d bytes took over a minute", name, len(body))
		}
	}
}

// TestForeignCharset: a form in a charset that writes ASCII as ASCII, in
// any state, is checked as bytes; one in any other (or one the encoding
// standard does not know) is refused.
func TestForeignCharset(t *testing.T) {
	for _, cs := range []string{"utf-8", "utf8", "us-ascii", "latin1", "iso-8859-15", "windows-1251", "shift_jis", "euc-jp", "gbk", "gb18030", "big5", "euc-kr", "koi8-r"} {
		if got := foreignCharset("application/x-www-form-urlencoded; charset=" + cs); got != "" {
			t.Errorf("charset %s refused", cs)
		}
	}
	for _, cs := range []string{"utf-16", "utf-16le", "utf-16be", "unicode", "utf-7", "utf-32", "iso-2022-jp", "iso-2022-kr", "hz-gb-2312", "ibm037", ""} {
		if got := foreignCharset("application/x-www-form-urlencoded; charset=" + cs); got != cs {
			t.Errorf("charset %q: %q, want it refused", cs, got)
		}
	}
}
