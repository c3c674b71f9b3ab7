package tenureui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

const csrfCookie = "tenureui_csrf"

// csrfToken returns the request's CSRF token, issuing a new cookie when the request carries
// no valid one. The token is double-submitted: an HttpOnly, SameSite=Strict cookie and a
// hidden form field that must be equal, and it is signed with Config.CSRFKey so a cookie
// planted by another site (e.g. a sibling subdomain) is not accepted.
func (h *Handler) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && h.validToken(c.Value) {
		return c.Value
	}
	nonce := make([]byte, 18)
	_, _ = rand.Read(nonce)
	n := base64.RawURLEncoding.EncodeToString(nonce)
	tok := n + "." + h.sign(n)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: tok, Path: h.cfg.Prefix + "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return tok
}

func (h *Handler) sign(nonce string) string {
	m := hmac.New(sha256.New, h.csrf)
	m.Write([]byte(nonce))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (h *Handler) validToken(tok string) bool {
	n, sig, ok := strings.Cut(tok, ".")
	return ok && n != "" && hmac.Equal([]byte(sig), []byte(h.sign(n)))
}

// errCSRF is the answer to a POST without a matching token.
var errCSRF = errors.New("missing or invalid CSRF token: reload the page and try again")

func (h *Handler) checkCSRF(r *http.Request) error {
	c, err := r.Cookie(csrfCookie)
	if err != nil || !h.validToken(c.Value) {
		return errCSRF
	}
	r.Body = http.MaxBytesReader(nil, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		return fmt.Errorf("bad form: %w", err)
	}
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(c.Value)) != 1 {
		return errCSRF
	}
	return nil
}

// BasicAuth wraps h so that every request must carry HTTP basic-auth credentials equal to
// user and password (compared in constant time); others get 401 with a WWW-Authenticate
// challenge for realm. It is what `tenure serve -ui` uses; pair it with BasicAuthorizer.
func BasicAuth(h http.Handler, user, password, realm string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !basicOK(r, user, password) {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf("Basic realm=%q, charset=\"UTF-8\"", realm))
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// BasicAuthorizer returns an Authorizer that allows every action to a request carrying the
// basic-auth credentials user and password, with the user name as the actor, and refuses
// others with ErrForbidden.
func BasicAuthorizer(user, password string) Authorizer {
	return func(r *http.Request, _ Action) (string, error) {
		if !basicOK(r, user, password) {
			return "", ErrForbidden
		}
		return user, nil
	}
}

func basicOK(r *http.Request, user, password string) bool {
	u, p, ok := r.BasicAuth()
	if !ok {
		return false
	}
	uok := subtle.ConstantTimeCompare([]byte(u), []byte(user)) == 1
	pok := subtle.ConstantTimeCompare([]byte(p), []byte(password)) == 1
	return uok && pok
}
