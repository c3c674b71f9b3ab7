package generics_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
)

type textItem struct {
	Name string `json:"name"`
}

type textArgs struct {
	Title string            `json:"title"`
	Items []textItem        `json:"items,omitempty"`
	Tags  map[string]string `json:"tags,omitempty"`
	Raw   json.RawMessage   `json:"raw,omitempty"`
	Note  *string           `json:"note,omitempty"`
	Any   any               `json:"any,omitempty"`
}

func (textArgs) Kind() string        { return "text_args" }
func (textArgs) PayloadVersion() int { return 1 }

func ptr(s string) *string { return &s }

// TestEncodeRejectsNULAndInvalidUTF8 checks that text jsonb cannot store as given (a NUL, which
// jsonb refuses with SQLSTATE 22P05, and invalid UTF-8, which encoding/json would silently
// replace with U+FFFD) is refused at encode time with a *PayloadError naming the field.
func TestEncodeRejectsNULAndInvalidUTF8(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   textArgs
		reason error
		path   string
	}{
		{"nul in field", textArgs{Title: "a\x00b"}, generics.ErrNULCharacter, "title"},
		{"nul in slice element", textArgs{Items: []textItem{{"ok"}, {"x\x00"}}}, generics.ErrNULCharacter, "items[1].name"},
		{"nul in map value", textArgs{Tags: map[string]string{"k": "\x00"}}, generics.ErrNULCharacter, "tags.k"},
		{"nul in odd map key", textArgs{Tags: map[string]string{"a b": "\x00"}}, generics.ErrNULCharacter, `tags["a b"]`},
		{"nul in map key", textArgs{Tags: map[string]string{"k\x00": "v"}}, generics.ErrNULCharacter, "tags"},
		{"nul behind pointer", textArgs{Note: ptr("\x00")}, generics.ErrNULCharacter, "note"},
		{"nul in interface", textArgs{Any: []any{1, "\x00"}}, generics.ErrNULCharacter, "any[1]"},
		{"nul escape in raw json", textArgs{Raw: json.RawMessage(`{"a":"\u0000"}`)}, generics.ErrNULCharacter, "raw.a"},
		{"invalid utf8 in field", textArgs{Title: "caf\xe9"}, generics.ErrInvalidUTF8, "title"},
		{"invalid utf8 in slice", textArgs{Items: []textItem{{"\xff"}}}, generics.ErrInvalidUTF8, "items[0].name"},
		{"invalid utf8 in map key", textArgs{Tags: map[string]string{"\xfe": "v"}}, generics.ErrInvalidUTF8, "tags"},
		{"invalid utf8 in raw json", textArgs{Raw: json.RawMessage("{\"a\":\"\xff\"}")}, generics.ErrInvalidUTF8, "raw.a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := generics.Encode(tc.args, 0)
			require.Error(t, err, "encoded as %q", raw)
			require.Nil(t, raw)
			require.ErrorIs(t, err, generics.ErrInvalidPayload)
			require.ErrorIs(t, err, tc.reason)
			var perr *generics.PayloadError
			require.True(t, errors.As(err, &perr))
			require.Equal(t, "text_args", perr.Kind)
			require.Equal(t, 1, perr.Version)
			require.Equal(t, tc.path, perr.Path)
			if tc.path != "" {
				require.Contains(t, err.Error(), tc.path)
			}
		})
	}
}

// TestEncodeKeepsValidText makes sure the checks do not reject what is fine: a real U+FFFD,
// an escaped backslash followed by "u0000", and other control characters.
func TestEncodeKeepsValidText(t *testing.T) {
	for _, s := range []string{"\uFFFD", `\u0000`, "tab\tnew\nline\x01", "日本語", strings.Repeat("é", 100)} {
		raw, err := generics.Encode(textArgs{Title: s}, 0)
		require.NoError(t, err, "%q", s)
		var back textArgs
		require.NoError(t, json.Unmarshal(raw, &back))
		require.Equal(t, s, back.Title)
	}
	raw, err := generics.Encode(textArgs{Raw: json.RawMessage(`{"a":"\\u0000"}`)}, 0)
	require.NoError(t, err)
	require.Contains(t, string(raw), `\\u0000`)
}
