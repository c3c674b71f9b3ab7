package generics

import (
	"bytes"
	"fmt"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// JSONSize returns the number of bytes of raw's text as PostgreSQL renders it once stored as a
// jsonb (what `octet_length(raw::jsonb::text)` returns, PostgreSQL 13 and later), without a
// round trip: the measure every JSON limit of Tenure uses (see the constants of limits.go).
//
// It refuses what a jsonb cannot hold as given, with the reason PostgreSQL would give:
// ErrNULCharacter (an escaped \u0000, SQLSTATE 22P05), ErrInvalidUTF8 (SQLSTATE 22021),
// ErrInvalidJSON (bad syntax, an unpaired surrogate escape, a number outside numeric's range),
// and ErrJSONTooDeep beyond MaxJSONDepth levels.
//
// The rendering it measures: objects keep one entry per key (the last one written), entries
// separated by ", " and keys from values by ": "; arrays separated by ", "; strings with \", \\,
// \b, \f, \n, \r, \t escaped in two bytes and other control characters in six (\u00XX), every
// other character as its UTF-8 bytes; numbers as numeric prints them (no exponent, the
// written fraction digits kept: 1.50e1 is 15.0, -0 is 0). FuzzJSONSizeAgreesWithPostgres
// checks it against a real server.
func JSONSize(raw []byte) (int, error) {
	s := sizerPool.Get().(*sizer)
	defer func() {
		clear(s.keys[:cap(s.keys)]) // drop references to raw
		*s = sizer{keys: s.keys[:0], sizes: s.sizes[:0]}
		sizerPool.Put(s)
	}()
	s.raw = raw
	s.ws()
	n := s.value(0)
	if s.err != nil {
		return 0, s.err
	}
	s.ws()
	if s.i != len(s.raw) {
		return 0, s.fail("trailing data")
	}
	return n, nil
}

// sizerPool keeps sizers with their key stacks, so measuring allocates nothing in the common case.
var sizerPool = sync.Pool{New: func() any { return &sizer{keys: make([][]byte, 0, 32), sizes: make([]int, 0, 32)} }}

type sizer struct {
	raw   []byte
	i     int
	err   error
	keys  [][]byte // decoded keys of the open objects, a stack (reused)
	sizes []int    // their entries' sizes, parallel to keys
}

func (s *sizer) fail(msg string) error {
	if s.err == nil {
		s.err = fmt.Errorf("%w: %s at byte %d", ErrInvalidJSON, msg, s.i)
	}
	return s.err
}

func (s *sizer) ws() {
	for s.i < len(s.raw) {
		switch s.raw[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *sizer) lit(word string) int {
	if !bytes.HasPrefix(s.raw[s.i:], []byte(word)) {
		s.fail("invalid token")
		return 0
	}
	s.i += len(word)
	return len(word)
}

func (s *sizer) value(depth int) int {
	if s.err != nil {
		return 0
	}
	if s.i >= len(s.raw) {
		s.fail("unexpected end")
		return 0
	}
	switch c := s.raw[s.i]; {
	case c == '{':
		if depth >= MaxJSONDepth {
			s.err = fmt.Errorf("%w: more than %d levels", ErrJSONTooDeep, MaxJSONDepth)
			return 0
		}
		return s.object(depth + 1)
	case c == '[':
		if depth >= MaxJSONDepth {
			s.err = fmt.Errorf("%w: more than %d levels", ErrJSONTooDeep, MaxJSONDepth)
			return 0
		}
		return s.array(depth + 1)
	case c == '"':
		n, _ := s.str(false)
		return n
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	default:
		s.fail("invalid token")
		return 0
	}
}

func (s *sizer) array(depth int) int {
	s.i++ // '['
	s.ws()
	if s.i < len(s.raw) && s.raw[s.i] == ']' {
		s.i++
		return 2
	}
	n := 1 // '['
	for first := true; s.err == nil; first = false {
		if !first {
			n += 2 // ", "
		}
		s.ws()
		n += s.value(depth)
		s.ws()
		if s.err != nil {
			return 0
		}
		if s.i >= len(s.raw) {
			s.fail("unexpected end")
			return 0
		}
		switch s.raw[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			return n + 1
		default:
			s.fail("expected , or ]")
			return 0
		}
	}
	return 0
}

// object sizes an object, keeping the last entry of a repeated key as jsonb does.
func (s *sizer) object(depth int) int {
	s.i++ // '{'
	s.ws()
	if s.i < len(s.raw) && s.raw[s.i] == '}' {
		s.i++
		return 2
	}
	base := len(s.keys)
	n := s.objectEntries(depth, base)
	s.keys, s.sizes = s.keys[:base], s.sizes[:base]
	return n
}

// objectEntries reads the entries of an object whose '{' was consumed, keeping their keys and
// sizes on the sizer's stacks from base on.
func (s *sizer) objectEntries(depth, base int) int {
	for s.err == nil {
		s.ws()
		if s.i >= len(s.raw) || s.raw[s.i] != '"' {
			s.fail("expected a key")
			return 0
		}
		kn, key := s.str(true)
		s.ws()
		if s.err != nil {
			return 0
		}
		if s.i >= len(s.raw) || s.raw[s.i] != ':' {
			s.fail("expected :")
			return 0
		}
		s.i++
		s.ws()
		vn := s.value(depth)
		s.ws()
		if s.err != nil {
			return 0
		}
		entry := kn + 2 + vn // key ": " value
		dup := -1
		for j := base; j < len(s.keys); j++ {
			if bytes.Equal(s.keys[j], key) {
				dup = j - base
				break
			}
		}
		if dup >= 0 {
			s.sizes[base+dup] = entry // jsonb keeps the last value of a repeated key
		} else {
			s.keys = append(s.keys, key)
			s.sizes = append(s.sizes, entry)
		}
		if s.i >= len(s.raw) {
			s.fail("unexpected end")
			return 0
		}
		switch s.raw[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			entries := s.sizes[base:]
			n := 2 + 2*(len(entries)-1)
			for _, e := range entries {
				n += e
			}
			return n
		default:
			s.fail("expected , or }")
			return 0
		}
	}
	return 0
}

// str sizes a string as jsonb renders it; with wantKey it also returns the decoded bytes.
func (s *sizer) str(wantKey bool) (int, []byte) {
	s.i++ // opening quote
	n := 2
	var dec []byte
	start := s.i
	for {
		// The common run: printable ASCII that renders as itself.
		j := s.i
		for j < len(s.raw) {
			if c := s.raw[j]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
				break
			}
			j++
		}
		if j > s.i {
			n += j - s.i
			if wantKey && dec != nil {
				dec = append(dec, s.raw[s.i:j]...)
			}
			s.i = j
		}
		if s.i >= len(s.raw) {
			s.fail("unterminated string")
			return 0, nil
		}
		c := s.raw[s.i]
		switch {
		case c == '"':
			if wantKey && dec == nil {
				dec = s.raw[start:s.i]
			}
			s.i++
			return n, dec
		case c < 0x20:
			s.fail("control character in string")
			return 0, nil
		case c == '\\':
			if wantKey && dec == nil {
				dec = append([]byte(nil), s.raw[start:s.i]...)
			}
			r, ok := s.escape()
			if !ok {
				return 0, nil
			}
			n += renderedRune(r)
			if wantKey {
				dec = utf8.AppendRune(dec, r)
			}
		case c < utf8.RuneSelf:
			n += renderedByte(c)
			if wantKey && dec != nil {
				dec = append(dec, c)
			}
			s.i++
		default:
			r, size := utf8.DecodeRune(s.raw[s.i:])
			if r == utf8.RuneError && size <= 1 {
				s.err = fmt.Errorf("%w: at byte %d", ErrInvalidUTF8, s.i)
				return 0, nil
			}
			n += size
			if wantKey && dec != nil {
				dec = append(dec, s.raw[s.i:s.i+size]...)
			}
			s.i += size
		}
	}
}

// escape decodes one escape sequence at s.i (the backslash) into a rune.
func (s *sizer) escape() (rune, bool) {
	if s.i+1 >= len(s.raw) {
		s.fail("unterminated escape")
		return 0, false
	}
	c := s.raw[s.i+1]
	s.i += 2
	switch c {
	case '"', '\\', '/':
		return rune(c), true
	case 'b':
		return '\b', true
	case 'f':
		return '\f', true
	case 'n':
		return '\n', true
	case 'r':
		return '\r', true
	case 't':
		return '\t', true
	case 'u':
		r, ok := s.hex4()
		if !ok {
			return 0, false
		}
		switch {
		case r == 0:
			s.err = fmt.Errorf("%w: escaped \\u0000", ErrNULCharacter)
			return 0, false
		case utf16.IsSurrogate(r) && r < 0xDC00: // high surrogate: a low one must follow
			if s.i+1 < len(s.raw) && s.raw[s.i] == '\\' && s.raw[s.i+1] == 'u' {
				s.i += 2
				lo, ok := s.hex4()
				if !ok {
					return 0, false
				}
				if lo >= 0xDC00 && lo <= 0xDFFF {
					return utf16.DecodeRune(r, lo), true
				}
			}
			s.fail("unpaired high surrogate")
			return 0, false
		case utf16.IsSurrogate(r):
			s.fail("unpaired low surrogate")
			return 0, false
		}
		return r, true
	}
	s.fail("invalid escape")
	return 0, false
}

func (s *sizer) hex4() (rune, bool) {
	if s.i+4 > len(s.raw) {
		s.fail("short \\u escape")
		return 0, false
	}
	var r rune
	for _, c := range s.raw[s.i : s.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			s.fail("invalid \\u escape")
			return 0, false
		}
	}
	s.i += 4
	return r, true
}

// renderedByte is how many bytes jsonb's text output spends on an ASCII character of a string.
func renderedByte(c byte) int {
	switch {
	case c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t':
		return 2
	case c < 0x20:
		return 6 // \u00XX
	}
	return 1
}

func renderedRune(r rune) int {
	if r < utf8.RuneSelf {
		return renderedByte(byte(r))
	}
	return utf8.RuneLen(r)
}

// The bounds numeric puts on a value (PostgreSQL's NUMERIC_DSCALE_MAX and its weight limit of
// 32767 base-10000 digits before the point).
const (
	numericMaxScale     = 0x3FFF
	numericMaxIntDigits = 131072
)

// number sizes a JSON number as numeric_out prints it: the integer digits without leading
// zeros ("0" when there are none), then the point and exactly dscale digits, where dscale is
// the number of fraction digits written minus the exponent (at least 0); a minus sign unless
// the value is zero.
func (s *sizer) number() int {
	neg := false
	if s.raw[s.i] == '-' {
		neg = true
		s.i++
	}
	digits := func() int { // skips a run of digits, returns its length
		n := 0
		for s.i < len(s.raw) && s.raw[s.i] >= '0' && s.raw[s.i] <= '9' {
			n++
			s.i++
		}
		return n
	}
	intStart := s.i
	if s.i >= len(s.raw) {
		s.fail("invalid number")
		return 0
	}
	if s.raw[s.i] == '0' {
		s.i++
	} else if s.raw[s.i] >= '1' && s.raw[s.i] <= '9' {
		digits()
	} else {
		s.fail("invalid number")
		return 0
	}
	intDigits := s.raw[intStart:s.i]
	var frac []byte
	if s.i < len(s.raw) && s.raw[s.i] == '.' {
		s.i++
		fs := s.i
		if digits() == 0 {
			s.fail("invalid number")
			return 0
		}
		frac = s.raw[fs:s.i]
	}
	exp := 0
	if s.i < len(s.raw) && (s.raw[s.i] == 'e' || s.raw[s.i] == 'E') {
		s.i++
		eneg := false
		if s.i < len(s.raw) && (s.raw[s.i] == '+' || s.raw[s.i] == '-') {
			eneg = s.raw[s.i] == '-'
			s.i++
		}
		es := s.i
		if digits() == 0 {
			s.fail("invalid number")
			return 0
		}
		for _, c := range s.raw[es:s.i] {
			if exp > 1<<30 {
				break // far beyond any bound below
			}
			exp = exp*10 + int(c-'0')
		}
		if eneg {
			exp = -exp
		}
	}
	if s.i < len(s.raw) {
		// PostgreSQL's lexer reads a token up to a delimiter: "1x" or "01" is one bad token.
		if c := s.raw[s.i]; c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80 {
			s.fail("invalid number")
			return 0
		}
	}
	// All digits D = int + frac with the point after len(int)+exp of them.
	total := len(intDigits) + len(frac)
	point := len(intDigits) + exp
	dscale := len(frac) - exp
	if dscale < 0 {
		dscale = 0
	}
	// Integer digits printed: those of D before the point, without leading zeros, padded with
	// zeros when the point lies beyond D.
	lead := 0 // leading zeros of D
	for lead < total && digitAt(intDigits, frac, lead) == '0' {
		lead++
	}
	zero := lead == total
	intPrinted := 0
	if !zero && point > lead {
		intPrinted = point - lead
	}
	if dscale > numericMaxScale || intPrinted > numericMaxIntDigits || exp > 1<<30 || exp < -(1<<30) {
		s.fail("number outside numeric's range")
		return 0
	}
	n := intPrinted
	if n == 0 {
		n = 1 // "0"
	}
	if dscale > 0 {
		n += 1 + dscale
	}
	if neg && !zero {
		n++
	}
	return n
}

func digitAt(intDigits, frac []byte, i int) byte {
	if i < len(intDigits) {
		return intDigits[i]
	}
	return frac[i-len(intDigits)]
}
