package approve

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock"
	"github.com/airlock-sandbox/airlock/internal/jsonappend"
	"github.com/airlock-sandbox/airlock/internal/value"
)

// Display is a job as a person should read it before approving it. Every
// string is passed through the same escaping as [Visible], so a character
// that is invisible, reorders the text around it or is not text at all is
// shown as an escape and listed in Warnings: what the approver reads is
// what runs. The raw job is for machines; a person must be shown this.
type Display struct {
	Tenant    string `json:"tenant"`
	Tier      string `json:"tier"`
	Kind      string `json:"kind"`
	Situation string `json:"situation"` // "public" when the job names none, as the router reads it
	Lifecycle string `json:"lifecycle"` // "ephemeral" when the job names none
	Session   string `json:"session,omitempty"`
	Image     string `json:"image,omitempty"` // empty: the operator's default image
	// ImageDigest is the image content an approval binds (the digest Image
	// pointed at when the approval was requested); DisplayOf leaves it to
	// the server, which keeps the image store.
	ImageDigest string `json:"image_digest,omitempty"`
	Account     string `json:"account,omitempty"` // empty: the caller's default account
	// Clock and Seed are what the job pins time.now() and random to
	// (empty and 0: the tier's clock at the run, a fresh seed).
	Clock   string         `json:"clock,omitempty"`
	Seed    uint64         `json:"seed,omitempty"`
	Code    string         `json:"code,omitempty"`
	Module  *Content       `json:"module,omitempty"` // always summarised
	Entry   string         `json:"entry,omitempty"`
	Argv    []string       `json:"argv,omitempty"`
	Stdin   *Content       `json:"stdin,omitempty"`
	Files   []File         `json:"files,omitempty"`   // sorted by name
	Collect []string       `json:"collect,omitempty"` // what the job returns from its scratch
	Env     []string       `json:"env,omitempty"`     // NAME=value, sorted by name
	Input   map[string]any `json:"input,omitempty"`   // keys and strings escaped, at every depth
	Grants  DisplayGrants  `json:"grants"`
	Limits  airlock.Limits `json:"limits"`
	// Hidden counts the characters escaped and flagged, in all fields.
	Hidden int `json:"hidden"`
	// Fields names each field that holds any of them, in display order.
	Fields []string `json:"fields,omitempty"`
	// Warnings has one line per flagged character, such as
	// "argv[1]: U+202E RIGHT-TO-LEFT OVERRIDE at byte 3"; past
	// MaxWarnings, a last line says how many more there are.
	Warnings []string `json:"warnings,omitempty"`
}

// DisplayGrants are a job's grants as shown: secret names, never values.
type DisplayGrants struct {
	Read      []string          `json:"read,omitempty"`
	ScratchMB int64             `json:"scratch_mb,omitempty"`
	Net       []airlock.NetRule `json:"net,omitempty"`
	Spawn     bool              `json:"spawn,omitempty"`
	Secrets   []string          `json:"secrets,omitempty"` // names, sorted
	// Credentials are "ENV=REF": the variable and the reference the
	// executor resolves (never a value).
	Credentials []string `json:"credentials,omitempty"`
}

// Content is a payload as shown: its size and SHA-256, and its escaped
// text unless it is binary (it holds a NUL byte, as git decides). Binary
// content is summarised, not dumped.
type Content struct {
	Size   int    `json:"size"`
	SHA256 string `json:"sha256"`
	Binary bool   `json:"binary,omitempty"`
	Text   string `json:"text,omitempty"`
}

// File is one of a job's files as shown.
type File struct {
	Name string `json:"name"`
	Content
}

// Flag is one character that [Visible] escaped because a person could
// not see it, or would not see what it does.
type Flag struct {
	Field  string `json:"field,omitempty"` // the field it is in ("argv[1]"); empty from Visible
	Offset int    `json:"offset"`          // its byte offset in the original string
	Code   string `json:"code"`            // "U+202E", or "0xFF" for a byte that is not UTF-8
	Name   string `json:"name"`            // "RIGHT-TO-LEFT OVERRIDE"
}

func (f Flag) String() string {
	s := f.Code + " " + f.Name + " at byte " + strconv.Itoa(f.Offset)
	if f.Field != "" {
		s = f.Field + ": " + s
	}
	return s
}

// MaxWarnings bounds Display.Warnings: a file of a million zero-width
// spaces is one field and a count, not a million lines.
const MaxWarnings = 200

// Visible returns s as one line a person can read unambiguously, and the
// characters it had to escape. A backslash becomes `\\`; line feed, tab
// and carriage return `\n`, `\t`, `\r`; other ASCII controls and each
// byte that is not UTF-8 `\xNN`; every other flagged code point `\uNNNN`
// (`\UNNNNNNNN` above U+FFFF), hex in lower case. Flagged are controls
// (C0, DEL, C1), format characters (Cf: bidirectional controls,
// zero-width characters, tags), default-ignorable and Hangul filler
// characters, variation selectors, separators and spaces other than
// U+0020, private-use, noncharacter and unassigned code points (Unicode
// 15.0, as Go's tables), and a combining mark with nothing visible to
// combine with. Everything else, such as "naïve café 日本語", is unchanged.
// The escaping is reversible: every backslash in the result starts one.
func Visible(s string) (string, []Flag) {
	return escape(s, modeLine, "")
}

type mode int

const (
	modeLine mode = iota // one line: line feed and tab escaped too
	modeText             // multi-line text: line feed and tab kept
	modeHost             // a host name: non-ASCII escaped too (homographs)
)

// plain reports whether s needs no escaping in mode m: printable ASCII
// without a backslash (and line feed and tab in text).
func plain(s string, m mode) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c < 0x7f && c != '\\' || m == modeText && (c == '\n' || c == '\t') {
			continue
		}
		return false
	}
	return true
}

func escape(s string, m mode, field string) (string, []Flag) {
	if plain(s, m) {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	var flags []Flag
	flag := func(i int, code, name string) {
		flags = append(flags, Flag{Field: field, Offset: i, Code: code, Name: name})
	}
	base := false // a visible character precedes, for a combining mark to sit on
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
			flag(i, fmt.Sprintf("0x%02X", s[i]), "INVALID UTF-8 BYTE")
			base = false
		case r == '\\':
			b.WriteString(`\\`)
			base = false
		case m == modeText && (r == '\n' || r == '\t'):
			b.WriteRune(r)
			base = false
		case r == '\r' && m == modeText && strings.HasPrefix(s[i+1:], "\n"):
			// A CRLF line ending hides nothing; escaped so the output
			// holds no control, but not flagged.
			b.WriteString(`\r`)
			base = false
		default:
			name, hidden := classify(r)
			if !hidden && !base && unicode.Is(unicode.M, r) {
				name, hidden = "COMBINING MARK WITH NOTHING TO COMBINE WITH", true
			}
			if !hidden && m == modeHost && r >= utf8.RuneSelf {
				name, hidden = "NON-ASCII CHARACTER IN A HOST NAME", true
			}
			if !hidden {
				b.WriteString(s[i : i+n])
				base = true
				break
			}
			switch {
			case r == '\n':
				b.WriteString(`\n`)
			case r == '\t':
				b.WriteString(`\t`)
			case r == '\r':
				b.WriteString(`\r`)
			case r < 0x20 || r == 0x7f:
				fmt.Fprintf(&b, `\x%02x`, r)
			case r <= 0xffff:
				fmt.Fprintf(&b, `\u%04x`, r)
			default:
				fmt.Fprintf(&b, `\U%08x`, r)
			}
			flag(i, fmt.Sprintf("U+%04X", r), name)
			base = false
		}
		i += n
	}
	return b.String(), flags
}

// classify names r and says whether it is hidden, whatever its context.
func classify(r rune) (string, bool) {
	if name, ok := names[r]; ok {
		return name, true
	}
	switch {
	case r < 0x20 || r >= 0x7f && r <= 0x9f:
		return "CONTROL CHARACTER", true
	case r < 0x7f:
		return "", false
	case unicode.Is(unicode.Variation_Selector, r):
		switch {
		case r >= 0xfe00 && r <= 0xfe0f:
			return "VARIATION SELECTOR-" + strconv.Itoa(int(r-0xfe00+1)), true
		case r >= 0xe0100:
			return "VARIATION SELECTOR-" + strconv.Itoa(int(r-0xe0100+17)), true
		}
		return "MONGOLIAN FREE VARIATION SELECTOR", true
	case r >= 0xe0000 && r <= 0xe007f:
		return tagName(r), true
	case unicode.Is(unicode.Cf, r):
		return "FORMAT CHARACTER", true
	case unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r):
		return "DEFAULT-IGNORABLE CHARACTER", true
	case unicode.In(r, unicode.Zs, unicode.Zl, unicode.Zp):
		return "SPACE CHARACTER", true
	case unicode.Is(unicode.Co, r):
		return "PRIVATE-USE CHARACTER", true
	case unicode.Is(unicode.Noncharacter_Code_Point, r):
		return "NONCHARACTER", true
	case !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z):
		// The other categories are taken above (surrogates never decode);
		// Go's table C would also hold the unassigned code points.
		return "UNASSIGNED CODE POINT (UNICODE " + unicode.Version + ")", true
	}
	return "", false
}

// tagName names a tag character, spelling out the ASCII it smuggles.
func tagName(r rune) string {
	c := r - 0xe0000
	switch {
	case c == 0x01:
		return "LANGUAGE TAG"
	case c == 0x7f:
		return "CANCEL TAG"
	case c == 0x20:
		return "TAG SPACE"
	case c >= '0' && c <= '9':
		return "TAG DIGIT " + string(c)
	case c >= 'A' && c <= 'Z':
		return "TAG LATIN CAPITAL LETTER " + string(c)
	case c >= 'a' && c <= 'z':
		return "TAG LATIN SMALL LETTER " + string(c-'a'+'A')
	case c > 0x20 && c < 0x7f:
		return "TAG " + strconv.QuoteRune(c)
	}
	return "TAG CHARACTER"
}

// names are the hidden characters most often used to deceive, by their
// Unicode names.
var names = map[rune]string{
	0x00: "NULL", 0x07: "BELL", 0x08: "BACKSPACE", 0x09: "CHARACTER TABULATION",
	0x0a: "LINE FEED", 0x0b: "LINE TABULATION", 0x0c: "FORM FEED",
	0x0d: "CARRIAGE RETURN", 0x1b: "ESCAPE", 0x7f: "DELETE",
	0x85: "NEXT LINE", 0x90: "DEVICE CONTROL STRING",
	0x9b: "CONTROL SEQUENCE INTRODUCER", 0x9d: "OPERATING SYSTEM COMMAND",
	0xa0: "NO-BREAK SPACE", 0xad: "SOFT HYPHEN",
	0x034f: "COMBINING GRAPHEME JOINER", 0x061c: "ARABIC LETTER MARK",
	0x115f: "HANGUL CHOSEONG FILLER", 0x1160: "HANGUL JUNGSEONG FILLER",
	0x1680: "OGHAM SPACE MARK", 0x180e: "MONGOLIAN VOWEL SEPARATOR",
	0x2000: "EN QUAD", 0x2001: "EM QUAD", 0x2002: "EN SPACE", 0x2003: "EM SPACE",
	0x2004: "THREE-PER-EM SPACE", 0x2005: "FOUR-PER-EM SPACE",
	0x2006: "SIX-PER-EM SPACE", 0x2007: "FIGURE SPACE",
	0x2008: "PUNCTUATION SPACE", 0x2009: "THIN SPACE", 0x200a: "HAIR SPACE",
	0x200b: "ZERO WIDTH SPACE", 0x200c: "ZERO WIDTH NON-JOINER",
	0x200d: "ZERO WIDTH JOINER", 0x200e: "LEFT-TO-RIGHT MARK",
	0x200f: "RIGHT-TO-LEFT MARK", 0x2028: "LINE SEPARATOR",
	0x2029: "PARAGRAPH SEPARATOR", 0x202a: "LEFT-TO-RIGHT EMBEDDING",
	0x202b: "RIGHT-TO-LEFT EMBEDDING", 0x202c: "POP DIRECTIONAL FORMATTING",
	0x202d: "LEFT-TO-RIGHT OVERRIDE", 0x202e: "RIGHT-TO-LEFT OVERRIDE",
	0x202f: "NARROW NO-BREAK SPACE", 0x205f: "MEDIUM MATHEMATICAL SPACE",
	0x2060: "WORD JOINER", 0x2061: "FUNCTION APPLICATION",
	0x2062: "INVISIBLE TIMES", 0x2063: "INVISIBLE SEPARATOR",
	0x2064: "INVISIBLE PLUS", 0x2066: "LEFT-TO-RIGHT ISOLATE",
	0x2067: "RIGHT-TO-LEFT ISOLATE", 0x2068: "FIRST STRONG ISOLATE",
	0x2069: "POP DIRECTIONAL ISOLATE", 0x2800: "BRAILLE PATTERN BLANK",
	0x3000: "IDEOGRAPHIC SPACE", 0x3164: "HANGUL FILLER",
	0xfeff: "ZERO WIDTH NO-BREAK SPACE", 0xffa0: "HALFWIDTH HANGUL FILLER",
	0xfff9: "INTERLINEAR ANNOTATION ANCHOR",
	0xfffa: "INTERLINEAR ANNOTATION SEPARATOR",
	0xfffb: "INTERLINEAR ANNOTATION TERMINATOR",
}

// DisplayOf returns job as a person should see it before approving it
// to run on tier for tenant. Secret values are never in it.
func DisplayOf(job *airlock.Job, tier, tenant string) Display {
	var d displayer
	out := Display{
		Tenant:    d.line("tenant", tenant),
		Tier:      d.line("tier", tier),
		Kind:      d.line("kind", string(job.Kind)),
		Situation: d.line("situation", string(or(job.Situation, airlock.SituationPublic))),
		Lifecycle: d.line("lifecycle", string(or(job.Lifecycle, airlock.LifecycleEphemeral))),
		Session:   d.line("session", job.Session),
		Image:     d.line("image", job.Image),
		Account:   d.line("account", job.Account),
		Seed:      job.Seed,
		Code:      d.text("code", job.Code),
		Entry:     d.line("entry", job.Entry),
		Limits:    job.Limits,
	}
	if !job.Clock.IsZero() {
		out.Clock = job.Clock.Format(time.RFC3339Nano) // with its offset, as the program reads it
	}
	if len(job.Module) > 0 {
		out.Module = summary(string(job.Module))
		out.Module.Binary = true
	}
	for i, a := range job.Argv {
		out.Argv = append(out.Argv, d.line("argv["+strconv.Itoa(i)+"]", a))
	}
	if job.Stdin != "" {
		out.Stdin = d.content("stdin", job.Stdin)
	}
	names := make([]string, 0, len(job.Files))
	for n := range job.Files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		shown, _ := escape(n, modeLine, "")
		label := "files[" + shown + "]"
		out.Files = append(out.Files, File{Name: d.line(label+" (name)", n), Content: *d.content(label, job.Files[n])})
	}
	for i, p := range job.Collect {
		out.Collect = append(out.Collect, d.line("collect["+strconv.Itoa(i)+"]", p))
	}
	for _, n := range value.SortedKeys(job.Env) {
		shown, _ := escape(n, modeLine, "") // the label too: a name is checked only when the job is prepared
		out.Env = append(out.Env, d.line("env["+shown+"]", n+"="+job.Env[n]))
	}
	if len(job.Input) > 0 {
		out.Input = d.object("input", job.Input)
	}
	g := &job.Grants
	dg := &out.Grants
	for i, p := range g.FS.Read {
		// Where the grant appears and whether it is writable are part of
		// what is approved: shown beside the path.
		shown := d.line(fmt.Sprintf("grants.fs.read[%d]", i), p)
		if guest, ok := g.FS.At[p]; ok {
			shown += " (at " + d.line(fmt.Sprintf("grants.fs.at[%d]", i), guest) + ")"
		}
		if slices.Contains(g.FS.Copy, p) {
			shown += " (writable copy)"
		}
		dg.Read = append(dg.Read, shown)
	}
	dg.ScratchMB, dg.Spawn = g.FS.ScratchMB, g.Spawn
	for i, r := range g.Net {
		at := fmt.Sprintf("grants.net[%d].", i)
		nr := airlock.NetRule{Host: d.escape(at+"host", r.Host, modeHost), Ports: r.Ports, Scheme: d.line(at+"scheme", r.Scheme)}
		for j, m := range r.Methods {
			nr.Methods = append(nr.Methods, d.line(fmt.Sprintf("%smethods[%d]", at, j), m))
		}
		for j, p := range r.Paths {
			nr.Paths = append(nr.Paths, d.line(fmt.Sprintf("%spaths[%d]", at, j), p))
		}
		dg.Net = append(dg.Net, nr)
	}
	secrets := make([]string, 0, len(g.Secrets))
	for n := range g.Secrets {
		secrets = append(secrets, n)
	}
	slices.Sort(secrets)
	for _, n := range secrets {
		dg.Secrets = append(dg.Secrets, d.line("grants.secrets", n))
	}
	for i, cr := range g.Credentials {
		dg.Credentials = append(dg.Credentials, d.line(fmt.Sprintf("grants.credentials[%d]", i), cr.Env+"="+cr.Ref))
	}
	out.Hidden, out.Fields, out.Warnings = d.hidden, d.fields, d.warnings
	if more := d.hidden - len(d.warnings); more > 0 {
		out.Warnings = append(out.Warnings, fmt.Sprintf("... and %d more hidden characters", more))
	}
	return out
}

func or[T ~string](v, def T) T {
	if v == "" {
		return def
	}
	return v
}

// displayer escapes a job's fields one by one and gathers their flags.
type displayer struct {
	hidden   int
	fields   []string
	warnings []string
}

func (d *displayer) escape(field, s string, m mode) string {
	out, flags := escape(s, m, field)
	if len(flags) > 0 {
		d.hidden += len(flags)
		d.fields = append(d.fields, field)
		for _, f := range flags {
			if len(d.warnings) >= MaxWarnings {
				break
			}
			d.warnings = append(d.warnings, f.String())
		}
	}
	return out
}

func (d *displayer) line(field, s string) string { return d.escape(field, s, modeLine) }
func (d *displayer) text(field, s string) string { return d.escape(field, s, modeText) }

// content shows s as escaped text, or summarises it when it is binary.
func (d *displayer) content(field, s string) *Content {
	c := summary(s)
	if !c.Binary {
		c.Text = d.text(field, s)
	}
	return c
}

func summary(s string) *Content {
	sum := sha256.Sum256([]byte(s))
	// Content that is not text (a NUL, or not UTF-8) is summarised, never
	// shown: its bytes would reach the approver's terminal or page.
	return &Content{Size: len(s), SHA256: hex.EncodeToString(sum[:]), Binary: strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s)}
}

// value shows an input value: strings as text, keys as lines, at every
// depth; numbers, booleans and null as they are.
func (d *displayer) value(field string, v any) any {
	switch x := v.(type) {
	case string:
		return d.text(field, x)
	case map[string]any:
		return d.object(field, x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = d.value(field+"["+strconv.Itoa(i)+"]", e)
		}
		return out
	case float64, float32:
		// A whole float is shown with its ".0", as the digest binds it:
		// the program sees a float, not the integer json.Marshal would
		// show.
		if b, err := jsonappend.Typed(nil, x, true); err == nil {
			return json.Number(b)
		}
	}
	return v
}

func (d *displayer) object(field string, m map[string]any) map[string]any {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make(map[string]any, len(m))
	for _, k := range keys {
		shown, _ := escape(k, modeLine, "")
		at := field + "." + shown
		out[d.line(at+" (key)", k)] = d.value(at, m[k])
	}
	return out
}
