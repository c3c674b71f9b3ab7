package tenureui

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenureui/internal/uidb"
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
	"dur":       fmtDur,
	"preview":   listPreview,
	"base":      path.Base,
	"maxIndent": func() int { return MaxIndentDepth },
	"bytes":     func(n int) string { return fmtBytes(int64(n)) },
	"rate":      func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) },
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
		h.failRead(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "jobs", p)
}

type jobView struct {
	Job jobRow
	// Args and Output are cut to their part of MaxJobPageBytes (Raw downloads them whole).
	Args, Output shownValue
	// Errors are the newest entries of the error history (ErrorsOmitted older ones left
	// out); when the history cannot be shown that way (cut, or not what the engine writes)
	// ErrorsRaw shows it as text.
	Errors        []shownError
	ErrorsOmitted int
	ErrorsRaw     *shownValue
	// Metadata likewise: the first pairs by key, or MetadataRaw as text.
	Metadata        []shownPair
	MetadataOmitted int
	MetadataRaw     *shownValue
	Effects         []uidb.UIJobEffectsRow
	EffectsMore     bool
	Audit           []uidb.UIJobAuditRow
	AuditMore       bool
	// Flow: the workflow or sequence the job is in (flows.go), nil when none.
	Flow *jobFlow
}

// jobDetail serves the job page: one bounded read of the job (UIJob: heads of its stored
// values, never the values), at most effectsShown effects and auditShown audit entries, each
// value cut to its part of MaxJobPageBytes.
func (h *Handler) jobDetail(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("%q is not a job id", r.PathValue("id")))
		return
	}
	ctx := r.Context()
	v := &jobView{}
	err = h.read(ctx, func(q *uidb.Queries) error {
		j, err := q.UIJob(ctx, uidb.UIJobParams{ID: id, TextChars: textChars, ValueChars: ValueChars})
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %d", jobs.ErrNotFound, id)
		}
		if err != nil {
			return err
		}
		v.Job = jobRow{j}
		if v.Flow, err = readJobFlow(ctx, q, id, j.State); err != nil {
			return err
		}
		if v.Effects, err = q.UIJobEffects(ctx, uidb.UIJobEffectsParams{JobID: id, TextChars: textChars, ValueChars: effectResultBytes,
			MaxRows: effectsShown + 1}); err != nil {
			return err
		}
		v.Audit, err = q.UIJobAudit(ctx, uidb.UIJobAuditParams{JobID: &id, TextChars: auditReasonBytes + 1, ValueChars: auditDetailBytes,
			MaxRows: auditShown + 1})
		return err
	})
	if errors.Is(err, jobs.ErrNotFound) {
		h.fail(w, r, http.StatusNotFound, err)
		return
	}
	if err != nil {
		h.failRead(w, r, err)
		return
	}
	j := &v.Job
	raw := func(field string) string { return fmt.Sprintf("%s/jobs/%d/raw/%s", h.cfg.Prefix, id, field) }
	v.Args = showValue(j.ArgsHead, j.ArgsStored, shownArgs, raw("args"))
	if j.OutputHead != "" {
		v.Output = showValue(j.OutputHead, j.OutputStored, shownOutput, raw("output"))
	}
	var ok bool
	if v.Errors, v.ErrorsOmitted, ok = showErrors(j.ErrorsHead); !ok {
		sv := showValue(j.ErrorsHead, j.ErrorsStored, shownRaw, raw("errors"))
		v.ErrorsRaw = &sv
	}
	if v.Metadata, v.MetadataOmitted, ok = showMetadata(j.MetadataHead); !ok {
		sv := showValue(j.MetadataHead, j.MetadataStored, shownRaw, raw("metadata"))
		v.MetadataRaw = &sv
	}
	// The heads are shown; drop them before rendering (they can be 4 x ValueChars bytes each).
	j.ArgsHead, j.OutputHead, j.ErrorsHead, j.MetadataHead = "", "", "", ""
	j.LockedBy = clip(j.LockedBy, shownText)
	if len(v.Effects) > effectsShown {
		v.Effects, v.EffectsMore = v.Effects[:effectsShown], true
	}
	for i := range v.Effects {
		e := &v.Effects[i]
		e.Key, e.Name = clip(e.Key, shownText), clip(e.Name, shownText)
		e.ResultHead = clip(e.ResultHead, effectResultBytes)
	}
	if len(v.Audit) > auditShown {
		v.Audit, v.AuditMore = v.Audit[:auditShown], true
	}
	for i := range v.Audit {
		a := &v.Audit[i]
		a.Actor, a.Reason, a.DetailHead = clip(a.Actor, shownText), clip(a.Reason, auditReasonBytes), clip(a.DetailHead, auditDetailBytes)
	}
	p := h.newPage(w, r, fmt.Sprintf("Job %d", id))
	p.Data = v
	if r.URL.Query().Get("partial") == "1" {
		h.render(w, r, http.StatusOK, "job-live", p)
		return
	}
	h.render(w, r, http.StatusOK, "job", p)
}

// jobRaw serves one stored value of a job whole, as a JSON download (the job page links to
// it when it shows a value cut): at most Config.MaxRawBytes of it, read in one statement and
// written as read; a larger value is refused (413), never cut.
func (h *Handler) jobRaw(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("%q is not a job id", r.PathValue("id")))
		return
	}
	field := r.PathValue("field")
	switch field {
	case "args", "output", "errors", "metadata":
	default:
		h.fail(w, r, http.StatusNotFound, errors.New("a job's raw values are args, output, errors and metadata"))
		return
	}
	ctx := r.Context()
	var val []byte
	err = h.read(ctx, func(q *uidb.Queries) error {
		var err error
		val, err = q.UIJobRaw(ctx, uidb.UIJobRawParams{ID: id, Field: field, MaxBytes: int32(h.cfg.MaxRawBytes)})
		return err
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("%w: %d", jobs.ErrNotFound, id))
		return
	case err != nil:
		h.failRead(w, r, err)
		return
	case val == nil:
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("job %d has no %s", id, field))
		return
	case len(val) > h.cfg.MaxRawBytes:
		h.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Errorf("the %s of job %d are over %s (Config.MaxRawBytes): read them with SQL",
			field, id, fmtBytes(int64(h.cfg.MaxRawBytes))))
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="job-%d-%s.json"`, id, field))
	hd.Set("Content-Length", strconv.Itoa(len(val)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(val)
}

// failRead answers a failed read: 503 when its statement ran over Config.QueryTimeout.
func (h *Handler) failRead(w http.ResponseWriter, r *http.Request, err error) {
	if timedOut(err) {
		h.fail(w, r, http.StatusServiceUnavailable, fmt.Errorf("the dashboard's statement ran over its timeout (%v, Config.QueryTimeout): %w",
			h.cfg.QueryTimeout, err))
		return
	}
	h.fail(w, r, http.StatusInternalServerError, err)
}
