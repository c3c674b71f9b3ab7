package generics

import (
	"bytes"
	"encoding/json"
	"reflect"
	"regexp"
	"strconv"
	"unicode/utf8"
)

// checkText finds the first string in an encoded payload that PostgreSQL's jsonb cannot store
// as given: a NUL character (an escaped \u0000; jsonb refuses it with SQLSTATE 22P05) or text
// that is not valid UTF-8. encoding/json writes invalid UTF-8 in a Go string as the escape
// \ufffd (a real U+FFFD is written as its UTF-8 bytes), so that escape means the args held
// invalid UTF-8 — unless a custom marshaler wrote it on purpose, which args (the Go value the
// payload was encoded from) tells apart. It returns the JSON path of the offending string (for
// a bad object key, the path of the object) and ErrNULCharacter or ErrInvalidUTF8, or a nil
// error when the payload is clean. raw must be valid JSON (json.Marshal's output).
func checkText(raw []byte, args any) (string, error) {
	hasNUL := bytes.Contains(raw, []byte(`\u0000`))
	hasFFFD := bytes.Contains(raw, []byte(`\ufffd`))
	if !hasNUL && !hasFFFD && utf8.Valid(raw) {
		return "", nil
	}
	// An escape written for invalid UTF-8 only counts when the Go value really holds some;
	// otherwise a marshaler chose to write U+FFFD as an escape, which is fine.
	fffdIsBad := hasFFFD && hasInvalidUTF8(reflect.ValueOf(args), 0)
	s := textScanner{raw: raw, fffdIsBad: fffdIsBad}
	s.value("")
	return s.path, s.err
}

// textScanner walks valid, compact JSON (what json.Marshal produces), tracking the path of the
// current value, and stops at the first bad string.
type textScanner struct {
	raw       []byte
	i         int
	fffdIsBad bool
	path      string
	err       error
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func joinKey(path, key string) string {
	if identRE.MatchString(key) {
		if path == "" {
			return key
		}
		return path + "." + key
	}
	return path + "[" + strconv.Quote(key) + "]"
}

func (s *textScanner) value(path string) {
	if s.err != nil || s.i >= len(s.raw) {
		return
	}
	switch s.raw[s.i] {
	case '{':
		s.i++
		for s.err == nil && s.i < len(s.raw) && s.raw[s.i] != '}' {
			start := s.i
			if s.str(path); s.err != nil { // a bad key: report the object holding it
				return
			}
			var key string
			_ = json.Unmarshal(s.raw[start:s.i], &key) // valid JSON string: cannot fail
			s.i++                                      // ':'
			s.value(joinKey(path, key))
			if s.i < len(s.raw) && s.raw[s.i] == ',' {
				s.i++
			}
		}
		s.i++ // '}'
	case '[':
		s.i++
		for n := 0; s.err == nil && s.i < len(s.raw) && s.raw[s.i] != ']'; n++ {
			s.value(path + "[" + strconv.Itoa(n) + "]")
			if s.i < len(s.raw) && s.raw[s.i] == ',' {
				s.i++
			}
		}
		s.i++ // ']'
	case '"':
		s.str(path)
	default: // number, true, false, null
		for s.i < len(s.raw) && !bytes.ContainsRune([]byte(",]}"), rune(s.raw[s.i])) {
			s.i++
		}
	}
}

// str scans the string at s.i (its opening quote) to just past its closing quote, recording
// path and the reason when it holds a NUL or invalid UTF-8.
func (s *textScanner) str(path string) {
	fail := func(err error) { s.path, s.err = path, err }
	s.i++
	for s.i < len(s.raw) {
		c := s.raw[s.i]
		switch {
		case c == '"':
			s.i++
			return
		case c == '\\':
			if s.i+1 < len(s.raw) && s.raw[s.i+1] == 'u' && s.i+6 <= len(s.raw) {
				hex := string(s.raw[s.i+2 : s.i+6])
				if hex == "0000" {
					fail(ErrNULCharacter)
					return
				}
				if s.fffdIsBad && (hex == "fffd" || hex == "FFFD") {
					fail(ErrInvalidUTF8)
					return
				}
				s.i += 6
				continue
			}
			s.i += 2
		case c < utf8.RuneSelf:
			s.i++
		default:
			r, size := utf8.DecodeRune(s.raw[s.i:])
			if r == utf8.RuneError && size == 1 {
				fail(ErrInvalidUTF8)
				return
			}
			s.i += size
		}
	}
}

// hasInvalidUTF8 reports whether v holds, anywhere it can reach, a string or map key that is
// not valid UTF-8. depth bounds the walk (unexported pointer cycles are never marshaled, so
// json.Marshal's success does not rule them out).
func hasInvalidUTF8(v reflect.Value, depth int) bool {
	if depth > 1000 || !v.IsValid() {
		return false
	}
	switch v.Kind() {
	case reflect.String:
		return !utf8.ValidString(v.String())
	case reflect.Pointer, reflect.Interface:
		return !v.IsNil() && hasInvalidUTF8(v.Elem(), depth+1)
	case reflect.Struct:
		for i := range v.NumField() {
			if hasInvalidUTF8(v.Field(i), depth+1) {
				return true
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 { // []byte is encoded as base64
			return false
		}
		for i := range v.Len() {
			if hasInvalidUTF8(v.Index(i), depth+1) {
				return true
			}
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			if hasInvalidUTF8(it.Key(), depth+1) || hasInvalidUTF8(it.Value(), depth+1) {
				return true
			}
		}
	}
	return false
}
