package approve

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock"
)

// displayCase is one line of testdata/display.jsonl.
type displayCase struct {
	Name     string   `json:"name"`
	Class    string   `json:"class"` // plain or hidden
	Field    string   `json:"field"` // argv, code or host
	In       string   `json:"in"`
	InHex    string   `json:"in_hex"`
	Want     string   `json:"want"`
	Warnings []string `json:"warnings"`
}

func loadDisplayCases(t testing.TB) []displayCase {
	t.Helper()
	f, err := os.Open("testdata/display.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []displayCase
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var c displayCase
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		var extra struct {
			displayCase
			Why string `json:"why"`
		}
		if err := dec.Decode(&extra); err != nil {
			t.Fatalf("display.jsonl:%d: %v", n, err)
		}
		c = extra.displayCase
		if c.InHex != "" {
			b, err := hex.DecodeString(c.InHex)
			if err != nil {
				t.Fatalf("display.jsonl:%d: %v", n, err)
			}
			c.In = string(b)
		}
		cases = append(cases, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cases
}

// shown places s in one field of a job and returns how DisplayOf shows
// that field, and the display.
func shown(t *testing.T, field, s string) (string, Display) {
	t.Helper()
	switch field {
	case "argv":
		d := DisplayOf(&airlock.Job{Kind: airlock.KindCommand, Argv: []string{"prog", s}}, "process", "t")
		return d.Argv[1], d
	case "code":
		d := DisplayOf(&airlock.Job{Kind: airlock.KindStarlark, Code: s}, "starlark", "t")
		return d.Code, d
	case "host":
		d := DisplayOf(&airlock.Job{Kind: airlock.KindCommand, Argv: []string{"prog"}, Grants: airlock.Grants{Net: []airlock.NetRule{{Host: s}}}}, "process", "t")
		return d.Grants.Net[0].Host, d
	}
	t.Fatalf("unknown field %q", field)
	return "", Display{}
}

// TestDisplayCases runs testdata/display.jsonl: each hidden character is
// escaped and flagged with its name and offset, ordinary text is left as
// it is, and every escape reads back as the original.
func TestDisplayCases(t *testing.T) {
	cases := loadDisplayCases(t)
	classes := map[string]bool{}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			classes[strings.Split(c.Name, "/")[0]] = true
			got, d := shown(t, c.Field, c.In)
			if got != c.Want {
				t.Errorf("shown as %q, want %q", got, c.Want)
			}
			warnings := c.Warnings
			if len(warnings) == 0 {
				warnings = nil
			}
			if !slices.Equal(d.Warnings, warnings) {
				t.Errorf("warnings %q, want %q", d.Warnings, warnings)
			}
			if d.Hidden != len(c.Warnings) {
				t.Errorf("hidden = %d, want %d", d.Hidden, len(c.Warnings))
			}
			if (c.Class == "plain") != (len(c.Warnings) == 0) || (c.Class == "plain") != (len(d.Fields) == 0) {
				t.Errorf("class %s with warnings %q, fields %q", c.Class, c.Warnings, d.Fields)
			}
			m := map[string]mode{"argv": modeLine, "code": modeText, "host": modeHost}[c.Field]
			if back, err := unescape(got, m); err != nil || back != c.In {
				t.Errorf("reads back as %q (%v), want %q", back, err, c.In)
			}
			if c.Field == "argv" {
				v, flags := Visible(c.In)
				if v != c.Want || len(flags) != len(c.Warnings) {
					t.Errorf("Visible = %q with %d flags, want %q with %d", v, len(flags), c.Want, len(c.Warnings))
				}
				for i, f := range flags {
					if i < len(c.Warnings) && "argv[1]: "+f.String() != c.Warnings[i] {
						t.Errorf("flag %d: %s, want %s", i, f, c.Warnings[i])
					}
				}
			}
		})
	}
	for _, class := range []string{"plain", "bidi", "zero-width", "format", "control", "utf8", "unassigned", "noncharacter", "private-use", "tag", "variation", "separator", "combining", "space", "blank", "host"} {
		if !classes[class] {
			t.Errorf("no display case of class %s", class)
		}
	}
}

// TestDisplayCoversEveryField puts a right-to-left override in every
// string of a job a person reads, and expects each escaped and named.
func TestDisplayCoversEveryField(t *testing.T) {
	const rlo = "\u202e"
	binary := "\x7fELF\x00\x01" + rlo
	job := airlock.Job{
		Kind:      airlock.Kind("command" + rlo),
		Code:      "code" + rlo,
		Module:    []byte("\x00asm" + rlo),
		Entry:     "entry" + rlo,
		Argv:      []string{"sh", "-c" + rlo},
		Stdin:     "stdin" + rlo,
		Input:     map[string]any{"k" + rlo: []any{"v" + rlo, int64(1), map[string]any{"deep": "x" + rlo}}, "n": json.Number("2")},
		Files:     map[string]string{"run" + rlo + ".sh": "echo" + rlo, "bin": binary},
		Env:       map[string]string{"MODE": "x" + rlo, "LANG": "C"},
		Situation: airlock.Situation("public" + rlo),
		Lifecycle: airlock.Lifecycle("session" + rlo),
		Session:   "s" + rlo,
		Tier:      "ignored: the tier passed in is shown",
		Limits:    airlock.Limits{WallMS: 1000},
		Grants: airlock.Grants{
			FS:      airlock.FSGrant{Read: []string{"/data" + rlo}, At: map[string]string{"/data" + rlo: "/g" + rlo}, ScratchMB: 8},
			Net:     []airlock.NetRule{{Host: "h" + rlo, Methods: []string{"GET" + rlo}, Ports: []int{443}, Scheme: "https" + rlo, Paths: []string{"/p" + rlo}}},
			Spawn:   true,
			Secrets: map[string]string{"TOKEN" + rlo: "secret-value-never-shown"},
		},
	}
	d := DisplayOf(&job, "tier"+rlo, "tenant"+rlo)
	wantFields := []string{
		"tenant", "tier", "kind", "situation", "lifecycle", "session", "code", "entry", "argv[1]", "stdin",
		`files[run\u202e.sh] (name)`, `files[run\u202e.sh]`, "env[MODE]",
		`input.k\u202e (key)`, `input.k\u202e[0]`, `input.k\u202e[2].deep`,
		"grants.fs.read[0]", "grants.fs.at[0]", "grants.net[0].host", "grants.net[0].scheme", "grants.net[0].methods[0]", "grants.net[0].paths[0]",
		"grants.secrets",
	}
	if !slices.Equal(d.Fields, wantFields) {
		t.Errorf("fields\n got %q\nwant %q", d.Fields, wantFields)
	}
	if d.Hidden != len(wantFields) || len(d.Warnings) != len(wantFields) {
		t.Errorf("hidden %d, %d warnings; want %d", d.Hidden, len(d.Warnings), len(wantFields))
	}
	out, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), rlo) || strings.Contains(string(out), `\u202e"`) && !strings.Contains(string(out), `\\u202e`) {
		t.Errorf("a raw override reached the display: %s", out)
	}
	if strings.Contains(string(out), "secret-value-never-shown") {
		t.Errorf("a secret value reached the display: %s", out)
	}
	if d.Tier != `tier\u202e` || d.Tenant != `tenant\u202e` || d.Argv[0] != "sh" || d.Argv[1] != `-c\u202e` {
		t.Errorf("tier %q, tenant %q, argv %q", d.Tier, d.Tenant, d.Argv)
	}
	sum := sha256.Sum256([]byte(binary))
	if f := d.Files[0]; f.Name != "bin" || !f.Binary || f.Text != "" || f.Size != len(binary) || f.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("binary file shown as %+v", f)
	}
	if f := d.Files[1]; f.Binary || f.Text != `echo\u202e` {
		t.Errorf("text file shown as %+v", f)
	}
	if d.Module == nil || !d.Module.Binary || d.Module.Text != "" || d.Module.Size != len(job.Module) {
		t.Errorf("module shown as %+v", d.Module)
	}
	if d.Stdin == nil || d.Stdin.Text != `stdin\u202e` {
		t.Errorf("stdin shown as %+v", d.Stdin)
	}
	if !slices.Equal(d.Env, []string{"LANG=C", `MODE=x\u202e`}) {
		t.Errorf("env shown as %q", d.Env)
	}
	if d.Input["n"] != json.Number("2") {
		t.Errorf("input number shown as %#v", d.Input["n"])
	}
	if g := d.Grants; !g.Spawn || g.ScratchMB != 8 || !slices.Equal(g.Net[0].Ports, []int{443}) || !slices.Equal(g.Secrets, []string{`TOKEN\u202e`}) || d.Limits.WallMS != 1000 {
		t.Errorf("grants or limits shown as %+v %+v", g, d.Limits)
	}

	if want := `/data\u202e (at /g\u202e)`; !slices.Equal(d.Grants.Read, []string{want}) {
		t.Errorf("placed read grant shown as %q, want %q", d.Grants.Read, want)
	}

	// A field added to Job must be shown (or be known not to be read by a
	// person): add it to DisplayOf, then here.
	known := map[string]bool{"Kind": true, "Code": true, "Module": true, "Entry": true, "Argv": true, "Stdin": true, "Input": true, "Files": true, "Collect": true, "Env": true, "Image": true,
		"Grants": true, "Limits": true, "Situation": true, "Lifecycle": true, "Session": true,
		"Tier": true, "Account": true, "Clock": true, "Seed": true} // Tier: the routed tier is shown; clock and seed are chosen per run
	for _, f := range reflect.VisibleFields(reflect.TypeFor[airlock.Job]()) {
		if !known[f.Name] {
			t.Errorf("airlock.Job.%s is not in the approver's display", f.Name)
		}
	}
	grants := map[string]bool{"FS": true, "Net": true, "Spawn": true, "Secrets": true, "Credentials": true, "Read": true, "At": true, "Copy": true, "ScratchMB": true}
	for _, typ := range []reflect.Type{reflect.TypeFor[airlock.Grants](), reflect.TypeFor[airlock.FSGrant]()} {
		for _, f := range reflect.VisibleFields(typ) {
			if !grants[f.Name] {
				t.Errorf("%s.%s is not in the approver's display", typ, f.Name)
			}
		}
	}
	if n := reflect.TypeFor[airlock.NetRule]().NumField(); n != 5 {
		t.Errorf("airlock.NetRule has %d fields; DisplayOf escapes 5", n)
	}
}

// TestDisplayWarningsAreBounded: a file of zero-width spaces is one field,
// a count and MaxWarnings lines, however long it is.
func TestDisplayWarningsAreBounded(t *testing.T) {
	d := DisplayOf(&airlock.Job{Kind: airlock.KindCommand, Argv: []string{"cat", "f"}, Files: map[string]string{"f": strings.Repeat("\u200b", 1000)}}, "process", "t")
	if d.Hidden != 1000 || !slices.Equal(d.Fields, []string{"files[f]"}) || len(d.Warnings) != MaxWarnings+1 {
		t.Fatalf("hidden %d, fields %q, %d warnings", d.Hidden, d.Fields, len(d.Warnings))
	}
	if last := d.Warnings[MaxWarnings]; last != fmt.Sprintf("... and %d more hidden characters", 1000-MaxWarnings) {
		t.Errorf("last warning %q", last)
	}
}

// FuzzVisible: whatever the input, in every mode the result is valid
// UTF-8, holds no character that would be flagged where it stands, and
// reads back as the input; every escape but `\\` and a CRLF's `\r` is
// flagged.
func FuzzVisible(f *testing.F) {
	for _, c := range loadDisplayCases(f) {
		f.Add(c.In)
	}
	f.Add("\xff\\u202e\u202e\r\n\r\t\n\u0301")
	f.Fuzz(func(t *testing.T, s string) {
		for _, m := range []mode{modeLine, modeText, modeHost} {
			out, flags := escape(s, m, "")
			if !utf8.ValidString(out) {
				t.Fatalf("mode %d: %q is not UTF-8", m, out)
			}
			back, err := unescape(out, m)
			if err != nil {
				t.Fatalf("mode %d: %q: %v", m, out, err)
			}
			if back != s {
				t.Fatalf("mode %d: %q reads back as %q, not %q", m, out, back, s)
			}
			escapes := strings.Count(out, `\`) - 2*strings.Count(out, `\\`)
			if m == modeText {
				escapes -= strings.Count(s, "\r\n")
			}
			if escapes != len(flags) {
				t.Fatalf("mode %d: %q has %d escapes, %d flags", m, out, escapes, len(flags))
			}
		}
	})
}

// unescape reverses escape, and fails where the escaped text still holds
// a character that mode m would flag: a hidden or (outside text) line
// character, a non-ASCII one in a host, or a combining mark at the start,
// at the start of a line or after an escape.
func unescape(s string, m mode) (string, error) {
	var b strings.Builder
	base := false
	for i := 0; i < len(s); {
		if s[i] == '\\' {
			if i+1 >= len(s) {
				return "", fmt.Errorf("a lone backslash at %d", i)
			}
			digits := map[byte]int{'x': 2, 'u': 4, 'U': 8}[s[i+1]]
			switch {
			case s[i+1] == '\\':
				b.WriteByte('\\')
			case s[i+1] == 'n':
				b.WriteByte('\n')
			case s[i+1] == 't':
				b.WriteByte('\t')
			case s[i+1] == 'r':
				b.WriteByte('\r')
			case digits > 0:
				h := s[i+2 : min(i+2+digits, len(s))]
				if len(h) != digits || strings.ToLower(h) != h {
					return "", fmt.Errorf("short escape at %d", i)
				}
				v, err := strconv.ParseUint(h, 16, 32)
				if err != nil {
					return "", fmt.Errorf("escape at %d: %v", i, err)
				}
				if s[i+1] == 'x' {
					b.WriteByte(byte(v))
				} else {
					b.WriteRune(rune(v))
				}
				i += digits
			default:
				return "", fmt.Errorf("unknown escape %q at %d", s[i:i+2], i)
			}
			i += 2
			base = false
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if name, hidden := classify(r); hidden && !(m == modeText && (r == '\n' || r == '\t')) {
			return "", fmt.Errorf("%U %s left raw at %d", r, name, i)
		}
		if unicode.Is(unicode.M, r) && !base {
			return "", fmt.Errorf("combining %U with no base at %d", r, i)
		}
		if m == modeHost && r >= utf8.RuneSelf {
			return "", fmt.Errorf("non-ASCII %U in a host at %d", r, i)
		}
		base = r != '\n' && r != '\t'
		b.WriteString(s[i : i+n])
		i += n
	}
	return b.String(), nil
}

// TestDisplayNonUTF8IsSummarised: content that is not UTF-8 (with no NUL
// to flag it) is summarised, never shown, and collect patterns are shown
// escaped.
func TestDisplayNonUTF8IsSummarised(t *testing.T) {
	raw := "\x1b]0;title\x07\xff\xfe"
	d := DisplayOf(&airlock.Job{Kind: airlock.KindCommand, Argv: []string{"cat"}, Files: map[string]string{"f": raw}, Stdin: raw,
		Collect: []string{"out/*.png", "x\u202e"}}, "process", "t")
	if f := d.Files[0]; !f.Binary || f.Text != "" || f.Size != len(raw) {
		t.Errorf("file shown as %+v", f)
	}
	if !d.Stdin.Binary || d.Stdin.Text != "" {
		t.Errorf("stdin shown as %+v", d.Stdin)
	}
	if !slices.Equal(d.Collect, []string{"out/*.png", `x\u202e`}) || !slices.Contains(d.Fields, "collect[1]") {
		t.Errorf("collect shown as %q, fields %q", d.Collect, d.Fields)
	}
	out, _ := json.Marshal(d)
	if strings.ContainsAny(string(out), "\x1b\x07") {
		t.Errorf("control bytes reached the display: %q", out)
	}
}
