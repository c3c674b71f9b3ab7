package tenureui

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/jobs"
)

// page is what every template gets.
type page struct {
	Title   string
	Prefix  string
	CSRF    string
	Actions bool
	// RefreshMs is the polling period of the page's live parts.
	RefreshMs int64
	Error     string
	Message   string
	Links     []link
	Now       time.Time
	Data      any
}

type link struct{ Href, Text string }

var funcs = template.FuncMap{
	"dur":    fmtDur,
	"pretty": prettyJSON,
	"rate":   func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) },
	"ts": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			if v.IsZero() {
				return "—"
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
		case *time.Time:
			if v == nil {
				return "—"
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
		}
		return fmt.Sprint(t)
	},
	"str": func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	},
	"since": func(now time.Time, t *time.Time) string {
		if t == nil {
			return "never"
		}
		return fmtDur(now.Sub(*t)) + " ago"
	},
	"query": func(m map[string]string, extra ...string) template.URL {
		v := url.Values{}
		for k, s := range m {
			if s != "" {
				v.Set(k, s)
			}
		}
		for i := 0; i+1 < len(extra); i += 2 {
			v.Set(extra[i], extra[i+1])
		}
		return template.URL(v.Encode())
	},
	"states": func() []string { return []string{"ready", "running", "succeeded", "dead", "cancelled"} },
	"join":   strings.Join,
	"ms":     func(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond },
}

func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func (h *Handler) newPage(w http.ResponseWriter, r *http.Request, title string) *page {
	p := &page{Title: title, Prefix: h.cfg.Prefix, Actions: h.cfg.EnableActions, RefreshMs: h.cfg.RefreshEvery.Milliseconds(), Now: time.Now()}
	if h.cfg.EnableActions {
		p.CSRF = h.csrfToken(w, r)
	}
	return p
}

// render executes template name into a buffer first, so a failing template never sends half
// a page.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, code int, name string, p *page) {
	if p.Prefix == "" {
		p.Prefix = h.cfg.Prefix
	}
	if p.Now.IsZero() {
		p.Now = time.Now()
	}
	p.Actions = p.Actions || (h.cfg.EnableActions && p.CSRF != "")
	var buf bytes.Buffer
	if err := h.tmpl.ExecuteTemplate(&buf, name, p); err != nil {
		h.log.ErrorContext(r.Context(), "tenureui: template", "template", name, "err", err)
		http.Error(w, "template error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	s, err := h.overviewSnapshot(r.Context())
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	p := h.newPage(w, r, "Overview")
	p.Data = s
	if r.URL.Query().Get("partial") == "1" {
		h.render(w, r, http.StatusOK, "overview-live", p)
		return
	}
	h.render(w, r, http.StatusOK, "overview", p)
}

type listView struct {
	Q      listQuery
	Filter map[string]string
	Res    *listResult
	Took   time.Duration
	Bulk   int
}

func (h *Handler) jobsList(w http.ResponseWriter, r *http.Request) {
	p := h.newPage(w, r, "Jobs")
	q, err := parseListQuery(r.URL.Query().Get)
	v := &listView{Q: q, Filter: q.values(), Bulk: h.cfg.MaxBulk}
	p.Data = v
	if err != nil {
		p.Error = err.Error()
		h.render(w, r, http.StatusBadRequest, "jobs", p)
		return
	}
	start := time.Now()
	v.Res, err = h.list(r.Context(), q, h.cfg.PageSize)
	v.Took = time.Since(start)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	h.render(w, r, http.StatusOK, "jobs", p)
}

type jobView struct {
	Job     *jobs.Row
	Effects []gen.TenureEffect
	Audit   []jobs.AuditEntry
}

func (h *Handler) jobDetail(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("%q is not a job id", r.PathValue("id")))
		return
	}
	ctx := r.Context()
	j, err := h.client.Get(ctx, id)
	if errors.Is(err, jobs.ErrNotFound) {
		h.fail(w, r, http.StatusNotFound, err)
		return
	}
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	v := &jobView{Job: j}
	if v.Effects, err = h.q.UIJobEffects(ctx, gen.UIJobEffectsParams{JobID: id, MaxRows: 200}); err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	if v.Audit, err = h.client.Audit(ctx, id, 0, 200); err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	p := h.newPage(w, r, fmt.Sprintf("Job %d", id))
	p.Data = v
	if r.URL.Query().Get("partial") == "1" {
		h.render(w, r, http.StatusOK, "job-live", p)
		return
	}
	h.render(w, r, http.StatusOK, "job", p)
}
