package tenureui

import (
	"bytes"
	"encoding/json"
	"html/template"
	"strings"
	"testing"
)

// escaped is s as html/template writes it in HTML text: what a page really spends on s.
func escaped(t testing.TB, s string) int {
	var b bytes.Buffer
	if err := textTmpl.Execute(&b, s); err != nil {
		t.Fatal(err)
	}
	return b.Len()
}

var textTmpl = template.Must(template.New("").Parse(`{{.}}`))

// strip removes the whitespace outside JSON strings (lexically, the way renderJSON reads its
// input) and reports the deepest nesting seen.
func strip(s string) (string, int) {
	var b strings.Builder
	depth, deepest := 0, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			j := i + 1
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			end := min(j+1, len(s))
			b.WriteString(s[i:end])
			i = end - 1
			continue
		case '{', '[':
			depth++
			deepest = max(deepest, depth)
		case '}', ']':
			depth--
		}
		b.WriteByte(c)
	}
	return b.String(), deepest
}

// FuzzRenderJSON checks the job page's JSON rendering on any input (valid JSON, cut heads,
// garbage): its escaped HTML never exceeds the budget; it only adds whitespace outside
// strings, so what it shows is a prefix of the input (all of it when not cut); on valid JSON
// nested at most MaxIndentDepth levels and within the budget it is exactly json.Indent's
// two-space indentation; its output is at most a constant factor of its input (no growth with
// depth); and it allocates a constant number of times, whatever the input's size or depth.
func FuzzRenderJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `{"a":1}`, `{"a": [1, 2, {"b": null}], "c": "x\"y\\"}`, `[[],[{}],{"":[]}]`,
		`{"s":"<script>alert(1)</script>'&+\u0001"}`, `{"a":"unterminated`, `]]]}}},,,::`, `"\`, `{"a":"\\"}`,
		"{\"a\":\t[ 1 ,\n 2 ]\r}", `{"ü":"日本語","e":"\ud83d\ude00"}`, "\x00\xff\xfe", `{"a":tru`,
		strings.Repeat("[", 9000) + strings.Repeat("]", 9000),
		`{"a":` + strings.Repeat(`{"a":`, 300) + "1" + strings.Repeat("}", 301),
		`{"a":[` + strings.Repeat(`"'<>&+",`, 3000) + `0]}`,
		`{"a":[` + strings.Repeat(`[],`, 5000) + `[]]}`,
		`{"s":"` + strings.Repeat(`<\"'&>+`, 20000) + `"}`,
		strings.Repeat(`{"k":[`, 16) + "1" + strings.Repeat("]}", 16),
		strings.Repeat(`{"k":[`, 17) + "1" + strings.Repeat("]}", 17),
	} {
		f.Add(s, 4096)
		f.Add(s, 100)
		f.Add(s, shownArgs)
	}
	f.Fuzz(func(t *testing.T, in string, max int) {
		max = min(max0(max), 1<<20)
		out, cut := renderJSON(in, max)
		if e := escaped(t, out); e > max {
			t.Fatalf("escaped rendering is %d bytes, over the budget %d", e, max)
		}
		so, _ := strip(out)
		si, depth := strip(in)
		if !strings.HasPrefix(si, so) {
			t.Fatalf("the rendering is not the input with whitespace added:\n in %.200q\nout %.200q", si, so)
		}
		if !cut && so != si {
			t.Fatalf("not cut, yet the rendering lost input:\n in %.200q\nout %.200q", si, so)
		}
		if len(out) > (2*MaxIndentDepth+3)*len(si)+1 {
			t.Fatalf("rendering of %d bytes grew to %d", len(si), len(out))
		}
		if !cut && depth <= MaxIndentDepth && json.Valid([]byte(in)) {
			var want bytes.Buffer
			if err := json.Indent(&want, []byte(in), "", "  "); err != nil {
				t.Fatal(err)
			}
			if out != strings.TrimSpace(want.String()) {
				t.Fatalf("shallow valid JSON not rendered as json.Indent:\n got %.300q\nwant %.300q", out, want.String())
			}
		}
		if n := testing.AllocsPerRun(2, func() { renderJSON(in, max) }); n > 6 {
			t.Fatalf("renderJSON allocated %v times (its output buffer and closures only)", n)
		}
	})
}

// FuzzClip: a clipped text escapes into at most its budget, is the text itself when that
// fits, else a prefix of it (whole runes) followed by "…".
func FuzzClip(f *testing.F) {
	for _, s := range []string{"", "abc", `"'<>&+`, strings.Repeat(`"`, 1000), "日本語", "\x00\xff", strings.Repeat("é<", 300)} {
		f.Add(s, 10)
		f.Add(s, 256)
	}
	f.Fuzz(func(t *testing.T, s string, max int) {
		max = min(max0(max), 1<<16)
		if max < 3 {
			max = 3
		}
		c := clip(s, max)
		if e := escaped(t, c); e > max {
			t.Fatalf("clip(%.100q, %d) escapes to %d bytes", s, max, e)
		}
		if escaped(t, s) <= max {
			if c != s {
				t.Fatalf("clip cut a text that fits: %.100q -> %.100q", s, c)
			}
			return
		}
		p, ok := strings.CutSuffix(c, "…")
		if !ok || !strings.HasPrefix(s, p) {
			t.Fatalf("clip(%.100q) = %.100q: not a prefix followed by …", s, c)
		}
	})
}
