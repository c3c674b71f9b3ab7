package main

import (
	"errors"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// redacted replaces a password in a printed DSN.
const redacted = "xxxxx"

// redactDSN returns dsn as it may be printed, with every part that could be a password
// replaced by "xxxxx", and those parts (as written, decoded, and as pgx would cut them) as
// secrets. It over-approximates, so that a malformed DSN never shows a piece of its password
// either, at the cost of hiding what follows a password that is not cleanly delimited:
//
//   - URL form (postgres:// or postgresql://): everything between the first ':' of the
//     userinfo and the last '@' of the whole string (a password holding '@', '/', '?' or '#'
//     unencoded is still covered), and everything after "password=" or "sslpassword=" in the
//     query (a password holding '&' or '#' unencoded is still covered);
//   - keyword/value form: everything after "password=" or "sslpassword=", but for a quoted
//     value closed by its quote (an unquoted password with spaces is still covered).
//
// The DSN is only ever printed in parseDSN's errors, for a DSN that does not parse or whose
// password pgx reads differently from how it is written.
func redactDSN(dsn string) (string, []string) {
	var secrets []string
	add := func(raw string, decode func(string) (string, error)) {
		if raw == "" {
			return
		}
		secrets = append(secrets, raw)
		if decode != nil {
			if d, err := decode(raw); err == nil && d != raw && d != "" {
				secrets = append(secrets, d)
			}
		}
	}
	// The ranges of dsn to redact, found on the string as written, then merged.
	var ranges [][2]int
	lower := strings.ToLower(dsn)
	if strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://") {
		scheme := strings.Index(dsn, "://") + 3
		rest := dsn[scheme:]
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			if c := strings.IndexByte(rest[:at], ':'); c >= 0 {
				add(rest[c+1:at], url.PathUnescape)
				ranges = append(ranges, [2]int{scheme + c + 1, scheme + at})
			}
		}
		for _, m := range urlPasswordParamRE.FindAllStringIndex(dsn, -1) {
			add(dsn[m[1]:], url.QueryUnescape) // the whole tail
			narrow := dsn[m[1]:]
			if i := strings.IndexAny(narrow, "&#"); i >= 0 {
				narrow = narrow[:i]
			}
			add(narrow, url.QueryUnescape) // as a URL parser cuts it
			ranges = append(ranges, [2]int{m[1], len(dsn)})
		}
		return redactRanges(dsn, ranges), secrets
	}
	for _, m := range kvPasswordRE.FindAllStringIndex(dsn, -1) {
		start, end := m[1], len(dsn)
		if start < len(dsn) && dsn[start] == '\'' {
			for j := start + 1; j < len(dsn); j++ {
				if dsn[j] == '\\' {
					j++
					continue
				}
				if dsn[j] == '\'' {
					end = j + 1
					break
				}
			}
			add(strings.TrimPrefix(strings.TrimSuffix(dsn[start:end], "'"), "'"), unquoteKV)
		} else {
			narrow := dsn[start:]
			if i := strings.IndexAny(narrow, " \t\n\r\f\v"); i >= 0 {
				narrow = narrow[:i]
			}
			add(narrow, unquoteKV)      // as pgx cuts it
			add(dsn[start:], unquoteKV) // the whole tail
		}
		ranges = append(ranges, [2]int{start, end})
	}
	return redactRanges(dsn, ranges), secrets
}

// redactRanges replaces each of the (possibly overlapping) byte ranges of s with "xxxxx".
func redactRanges(s string, ranges [][2]int) string {
	slices.SortFunc(ranges, func(a, b [2]int) int { return a[0] - b[0] })
	var b strings.Builder
	pos := 0
	for i := 0; i < len(ranges); {
		start, end := ranges[i][0], ranges[i][1]
		for i++; i < len(ranges) && ranges[i][0] <= end; i++ {
			end = max(end, ranges[i][1])
		}
		b.WriteString(s[pos:start])
		b.WriteString(redacted)
		pos = end
	}
	b.WriteString(s[pos:])
	return b.String()
}

var (
	urlPasswordParamRE = regexp.MustCompile(`(?i)[?&](?:ssl)?password=`)
	kvPasswordRE       = regexp.MustCompile(`(?:^|\s)(?:ssl)?password\s*=\s*`)
)

// unquoteKV undoes the backslash escapes of a quoted keyword/value.
func unquoteKV(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String(), nil
}

// errDSNPassword explains a DSN whose password pgx reads differently from how it is written.
var errDSNPassword = errors.New("its password does not parse as one piece: " +
	"percent-encode @ : / ? # % and spaces in a URL's password (e.g. @ as %40; an @ elsewhere in the URL too), " +
	"or quote a keyword/value password ('...', with \\' and \\\\)")

// parseDSN parses a connection string for pgx without ever returning an error that shows its
// password: a parse error names the redacted DSN and pgx's reason (dropped if it quotes a
// piece of the password), and a DSN that parses but whose password pgx read differently from
// how it is written (postgres://u:p@ss@host reads password "p" and host "ss@host", and would
// then show "ss" in a connection error) is refused the same way. It also returns the
// password's spellings, for scrub.
func parseDSN(dsn string) (*pgxpool.Config, []string, error) {
	shown, secrets := redactDSN(dsn)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		reason := "malformed"
		var pe *pgconn.ParseConfigError
		if msg := err.Error(); errors.As(err, &pe) {
			if i := strings.Index(msg, "`: "); i >= 0 {
				reason = msg[i+3:]
			}
		}
		if showsSecret(reason, secrets) {
			reason = "malformed"
		}
		return nil, secrets, usageErrorf("invalid database URL %s: %s", shown, reason)
	}
	if pw := cfg.ConnConfig.Password; len(secrets) > 0 {
		ok := false
		for _, s := range secrets {
			ok = ok || s == pw
		}
		if !ok {
			return nil, secrets, usageErrorf("invalid database URL %s: %v", shown, errDSNPassword)
		}
	}
	if pw := cfg.ConnConfig.Password; pw != "" {
		secrets = append(secrets, pw)
	}
	return cfg, secrets, nil
}

// showsSecret reports whether text holds a secret or, for one of 4 bytes or more, any 4-byte
// piece of it.
func showsSecret(text string, secrets []string) bool {
	for _, s := range secrets {
		if len(s) < 4 {
			if strings.Contains(text, s) {
				return true
			}
			continue
		}
		for i := 0; i+4 <= len(s); i++ {
			if strings.Contains(text, s[i:i+4]) {
				return true
			}
		}
	}
	return false
}

// scrub replaces every secret of 4 bytes or more in text (a printed error) with "xxxxx": a
// last line of defence, since parseDSN already refuses a DSN whose password would end up
// elsewhere.
func scrub(text string, secrets []string) string {
	for _, s := range secrets {
		if len(s) >= 4 {
			text = strings.ReplaceAll(text, s, redacted)
		}
	}
	return text
}
