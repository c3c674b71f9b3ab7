package dbschema

import "strings"

// TokenKind classifies a token of Lex.
type TokenKind int

// Token kinds.
const (
	Other       TokenKind = iota // white space, operators, punctuation: anything else, byte by byte runs
	Comment                      // -- to end of line, or /* ... */ (nested)
	String                       // '...', E'...' (with its prefix letter), B'', X'', U&'' (the U& is Other)
	QuotedIdent                  // "..."
	Ident                        // an unquoted identifier or keyword
	Number                       // a run of digits (a decimal point or exponent lexes as Other/Ident)
	Param                        // $1, $2, ...
	Dollar                       // $tag$ ... $tag$ (Body is the text between the tags)
)

// Token is one lexical token of SQL text; concatenating the Text of Lex's tokens gives the
// input back byte for byte.
type Token struct {
	Kind TokenKind
	Text string
	// Tag and Body, for a Dollar token: "$tag$" and the text between the tags (empty Tag
	// for an unterminated one, whose Text runs to the end of the input).
	Tag, Body string
}

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' || c == '$' }

// Lex splits sql into tokens as PostgreSQL's lexer does for what Rewrite needs: comments,
// string literals (standard ones, where only ” escapes a quote, and E” ones, where a
// backslash escapes too), quoted identifiers, dollar-quoted strings, identifiers, integer
// runs and parameters. It never fails: an unterminated literal or comment runs to the end.
func Lex(sql string) []Token {
	var out []Token
	emit := func(k TokenKind, text string) {
		// Merge runs of Other so the token list stays short.
		if k == Other && len(out) > 0 && out[len(out)-1].Kind == Other {
			out[len(out)-1].Text += text
			return
		}
		out = append(out, Token{Kind: k, Text: text})
	}
	i, n := 0, len(sql)
	for i < n {
		c := sql[i]
		switch {
		case c == '-' && i+1 < n && sql[i+1] == '-':
			j := strings.IndexByte(sql[i:], '\n')
			if j < 0 {
				j = n - i
			} else {
				j++
			}
			emit(Comment, sql[i:i+j])
			i += j
		case c == '/' && i+1 < n && sql[i+1] == '*':
			j, depth := i+2, 1
			for j < n && depth > 0 {
				switch {
				case sql[j] == '*' && j+1 < n && sql[j+1] == '/':
					depth--
					j += 2
				case sql[j] == '/' && j+1 < n && sql[j+1] == '*':
					depth++
					j += 2
				default:
					j++
				}
			}
			emit(Comment, sql[i:j])
			i = j
		case c == '\'':
			j := endOfString(sql, i, false)
			emit(String, sql[i:j])
			i = j
		case c == '"':
			j := i + 1
			for j < n {
				if sql[j] == '"' {
					if j+1 < n && sql[j+1] == '"' {
						j += 2
						continue
					}
					j++
					break
				}
				j++
			}
			emit(QuotedIdent, sql[i:j])
			i = j
		case c == '$':
			if i+1 < n && sql[i+1] >= '0' && sql[i+1] <= '9' {
				j := i + 1
				for j < n && sql[j] >= '0' && sql[j] <= '9' {
					j++
				}
				emit(Param, sql[i:j])
				i = j
				continue
			}
			tag, ok := dollarTag(sql[i:])
			if !ok {
				emit(Other, "$")
				i++
				continue
			}
			end := strings.Index(sql[i+len(tag):], tag)
			if end < 0 {
				out = append(out, Token{Kind: Dollar, Text: sql[i:], Body: sql[i+len(tag):]})
				i = n
				continue
			}
			bodyEnd := i + len(tag) + end
			out = append(out, Token{Kind: Dollar, Text: sql[i : bodyEnd+len(tag)], Tag: tag, Body: sql[i+len(tag) : bodyEnd]})
			i = bodyEnd + len(tag)
		case isIdentStart(c):
			j := i + 1
			for j < n && isIdentChar(sql[j]) {
				j++
			}
			word := sql[i:j]
			if j < n && sql[j] == '\'' && len(word) == 1 && strings.ContainsAny(word, "eEbBxXnN") {
				// A prefixed literal: E'..' (backslash escapes), B'..', X'..', N'..'.
				k := endOfString(sql, j, word == "e" || word == "E")
				emit(String, sql[i:k])
				i = k
				continue
			}
			emit(Ident, word)
			i = j
		case c >= '0' && c <= '9':
			j := i + 1
			for j < n && sql[j] >= '0' && sql[j] <= '9' {
				j++
			}
			emit(Number, sql[i:j])
			i = j
		default:
			emit(Other, sql[i:i+1])
			i++
		}
	}
	return out
}

// endOfString returns the index just past the string literal whose opening quote is at i.
func endOfString(sql string, i int, backslash bool) int {
	j, n := i+1, len(sql)
	for j < n {
		switch sql[j] {
		case '\\':
			if backslash {
				j += 2
				continue
			}
		case '\'':
			if j+1 < n && sql[j+1] == '\'' {
				j += 2
				continue
			}
			return j + 1
		}
		j++
	}
	return n
}

// dollarTag returns the opening "$tag$" at the start of s, if s starts with one.
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		c := s[j]
		if c == '$' {
			return s[:j+1], true
		}
		if !(isIdentStart(c) || j > 1 && c >= '0' && c <= '9') {
			return "", false
		}
	}
	return "", false
}

// Rewrite returns sql, written for the default schema "tenure", rewritten for schema (a valid
// name, see Validate); for Default it returns sql unchanged. It changes exactly:
//
//   - every identifier that names the schema: tenure (unquoted, in any case) or "tenure"
//     (quoted), as in tenure.jobs, tenure.enqueue(...) or CREATE SCHEMA tenure; Tenure's SQL
//     has no other object of that name;
//   - a string literal whose whole text is a NOTIFY channel of the default schema
//     ('tenure_jobs', 'tenure_cancel', 'tenure_queues',
//     'tenure_done', 'tenure_await') into the schema's channel, and the setting
//     'tenure.signals' into the schema's (SignalsSetting);
//   - an integer literal that is one of the default schema's int4 lock classes (1952804469 ..
//     1952804473) into the schema's class;
//
// and it does the same inside dollar-quoted strings (function bodies). Every other byte,
// in particular every other string literal ('tenure.concurrency_key') and every comment, is
// kept as it is.
func Rewrite(sql, schema string) string {
	if schema == Default || schema == "" {
		return sql
	}
	strs, ints := literalMap(schema)
	var b strings.Builder
	b.Grow(len(sql))
	rewriteInto(&b, sql, schema, strs, ints)
	return b.String()
}

func rewriteInto(b *strings.Builder, sql, schema string, strs, ints map[string]string) {
	toks := Lex(sql)
	for i, t := range toks {
		switch t.Kind {
		case Ident:
			if strings.EqualFold(t.Text, Default) {
				// Quote the name if the next byte could make it a literal's prefix (a schema
				// named e followed by a quote would turn into E'...').
				if i+1 < len(toks) && len(toks[i+1].Text) > 0 && (toks[i+1].Text[0] == '\'' || toks[i+1].Text[0] == '&') {
					b.WriteString(`"` + schema + `"`)
				} else {
					b.WriteString(schema)
				}
				continue
			}
		case QuotedIdent:
			if t.Text == `"`+Default+`"` {
				b.WriteString(`"` + schema + `"`)
				continue
			}
		case String:
			if len(t.Text) >= 2 && t.Text[0] == '\'' && t.Text[len(t.Text)-1] == '\'' {
				if to, ok := strs[t.Text[1:len(t.Text)-1]]; ok {
					b.WriteString("'" + to + "'")
					continue
				}
			}
		case Number:
			if to, ok := ints[t.Text]; ok && !(i > 0 && strings.HasSuffix(toks[i-1].Text, ".")) &&
				!(i+1 < len(toks) && len(toks[i+1].Text) > 0 && (toks[i+1].Text[0] == '.' || isIdentChar(toks[i+1].Text[0]))) {
				b.WriteString(to)
				continue
			}
		case Dollar:
			if t.Tag != "" {
				b.WriteString(t.Tag)
				rewriteInto(b, t.Body, schema, strs, ints)
				b.WriteString(t.Tag)
				continue
			}
		}
		b.WriteString(t.Text)
	}
}
