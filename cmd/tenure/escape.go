package main

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// esc makes a value read from the database (or an error that may quote one) safe to print on
// a terminal: every character that a terminal would act on instead of showing is replaced by
// a visible escape, so a kind, reason or error message holding ESC sequences cannot retitle
// the window, clear the screen or forge output lines, and a bidi override cannot reorder what
// follows it. Escaped are:
//
//   - C0 controls U+0000..U+001F, tab and newline included (\t, \n, \r, else \xNN): a value
//     never breaks a table row or column;
//   - DEL (\x7f) and the C1 controls U+0080..U+009F (\u0085: CSI is U+009B);
//   - the bidi controls U+061C, U+200E, U+200F, U+202A..U+202E, U+2066..U+2069 and the line and
//     paragraph separators U+2028, U+2029 (\u202e);
//   - each byte of invalid UTF-8 (\xNN).
//
// Everything else, backslashes included, is printed as it is: human-readable output is for
// reading; -json gives the exact values.
func esc(s string) string {
	clean := true
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if needsEscape(r, n) {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case needsEscape(r, n):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// escBytes is esc for a []byte value (a payload, an output, an audit detail).
func escBytes(b []byte) string { return esc(string(b)) }

// needsEscape reports whether the rune r, decoded from n bytes, is one esc replaces.
func needsEscape(r rune, n int) bool {
	switch {
	case r == utf8.RuneError && n <= 1: // invalid UTF-8 (a literal U+FFFD is 3 bytes and fine)
		return true
	case r < 0x20, r >= 0x7f && r <= 0x9f: // C0, DEL, C1
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true // bidi marks, embeddings, overrides and isolates
	case r == 0x2028, r == 0x2029:
		return true
	}
	return false
}
