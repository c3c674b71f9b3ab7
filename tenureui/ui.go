package tenureui

import (
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/internal/dbschema"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenureui/internal/uidb"
)

// Action names a mutation the dashboard can perform. The Authorizer is asked for each one.
type Action string

// The dashboard's mutations. Each one goes through a jobs.Client operator API, which records
// the actor and the reason in tenure.audit.
const (
	ActionCancel       Action = "cancel"        // jobs.Client.Cancel
	ActionRetry        Action = "retry"         // jobs.Client.Retry ("retry now")
	ActionReinject     Action = "reinject"      // jobs.Client.Reinject of a dead job
	ActionDelete       Action = "delete"        // jobs.Client.Delete
	ActionBulkReinject Action = "bulk-reinject" // jobs.Client.Reinject of each dead job of a filtered set
	ActionBulkCancel   Action = "bulk-cancel"   // jobs.Client.Cancel of each job of a filtered set
	ActionPause        Action = "pause"         // jobs.Client.PauseQueue
	ActionResume       Action = "resume"        // jobs.Client.ResumeQueue
)

// Authorizer decides whether the request may perform action, and names the actor recorded in
// the audit trail. Return a non-nil error to refuse (the dashboard answers 403 with the
// error's text and changes nothing); the actor must not be empty.
type Authorizer func(r *http.Request, action Action) (actor string, err error)

// ErrNilPool means New was called without a pool.
var ErrNilPool = errors.New("tenureui: pool must not be nil")

// ErrNoAuthorizer means Config.EnableActions is set without a Config.Authorizer: mutations
// need someone to answer "who is this, and may they?".
var ErrNoAuthorizer = errors.New("tenureui: EnableActions needs an Authorizer")

// ErrInvalidConfig means a Config field is out of range; the error names it.
var ErrInvalidConfig = errors.New("tenureui: invalid config")

// ErrSchemaMismatch means Config.Schema and the schema of Config.Client
// (jobs.Client.Schema) differ: the dashboard would show one schema's jobs and act on
// another's. The error names both; it also wraps ErrInvalidConfig.
var ErrSchemaMismatch = errors.New("tenureui: Config.Schema differs from Config.Client's schema")

// ErrForbidden is what the built-in BasicAuthorizer returns for a request without valid
// credentials. Authorizers may return it (or wrap it) too.
var ErrForbidden = errors.New("tenureui: forbidden")

// Defaults of Config.
const (
	DefaultRefreshEvery = 5 * time.Second
	DefaultWaitWindow   = 5 * time.Minute
	DefaultPageSize     = 50
	DefaultScanWindow   = 20000
	DefaultScanWindows  = 5
	DefaultMaxBulk      = 500
)

// Config configures the dashboard. A nil *Config, or zero fields, mean the documented defaults.
type Config struct {
	// Prefix is the path the handler is mounted under, without a trailing slash, e.g.
	// "/admin/jobs" for mux.Handle("/admin/jobs/", h). The handler strips it itself (do not
	// wrap it in http.StripPrefix) and builds every link with it. Default "" (the root).
	Prefix string
	// Schema is the PostgreSQL schema Tenure lives in (jobs.Config.Schema,
	// migrations.Options.Schema; docs/guide.md, "A schema of your own"): every page reads it
	// and every action writes it. Default: Client's schema when Client is set, else "tenure".
	// An invalid name is refused with a *migrations.InvalidSchemaError (errors.Is
	// migrations.ErrInvalidSchema, and ErrInvalidConfig); a Schema other than Client's with
	// ErrSchemaMismatch.
	Schema string
	// Client performs the operator actions (and reads jobs). Default: jobs.NewClient(pool,
	// &jobs.Config{Logger: Logger, Schema: Schema}).
	Client *jobs.Client
	// Logger receives request errors. Default slog.Default().
	Logger *slog.Logger
	// EnableActions turns on the mutations (cancel, retry, re-inject, delete, bulk, pause,
	// resume). Default false: the dashboard is read-only and answers every POST with 403.
	EnableActions bool
	// Authorizer is asked before each mutation; required with EnableActions.
	Authorizer Authorizer
	// RefreshEvery is how often an open overview or job page polls for fresh numbers, and how
	// long the overview's snapshot is shared between viewers: the database cost of the
	// overview is one snapshot per RefreshEvery however many pages are open. Default 5 s;
	// at least 1 s.
	RefreshEvery time.Duration
	// WaitWindow is the window of finished jobs the queue-wait percentiles are computed over
	// (jobs.Client.Stats' window). Default 5 min.
	WaitWindow time.Duration
	// PageSize is the number of jobs on a list page (1..500). Default 50.
	PageSize int
	// ScanWindow is the width, in job ids, of one primary-key window a list of finished (or
	// all) jobs reads; ScanWindows is how many windows one page view may read before it stops
	// and offers "search older". Together they bound a list page's cost on a table of any
	// size. Defaults 20000 and 5.
	ScanWindow, ScanWindows int
	// MaxBulk bounds the jobs one bulk action touches (1..10000). Default 500.
	MaxBulk int
	// CSRFKey signs the CSRF tokens (at least 32 bytes). Default: random per process (tokens
	// then do not survive a restart or work across replicas behind a load balancer).
	CSRFKey []byte
	// QueryTimeout is the statement timeout of the job page's and the list pages' statements
	// (they run in a read-only transaction with SET LOCAL statement_timeout); a page whose
	// statement runs out answers 503. Default DefaultQueryTimeout (5 s); 1 ms..10 min.
	QueryTimeout time.Duration
	// MaxRawBytes is the largest stored value, in bytes of JSON text, the raw download
	// (GET {Prefix}/jobs/{id}/raw/{args|output|errors|metadata}) serves; a larger one is
	// refused with 413, never cut. A download holds about twice this in memory. Default
	// DefaultMaxRawBytes (8 MiB); 1 KiB..1 GiB.
	MaxRawBytes int
}

// Handler is the dashboard, an http.Handler. It is safe for concurrent use.
type Handler struct {
	cfg    Config
	pool   *pgxpool.Pool
	sch    *dbschema.Schema // Config.Schema: every statement runs through sch.Wrap
	q      *uidb.Queries
	client *jobs.Client
	log    *slog.Logger
	mux    *http.ServeMux
	tmpl   *template.Template
	csrf   []byte

	mu   sync.Mutex
	snap *snapshot
	// prevWorkers is the worker counters of the previous snapshot, for per-worker rates.
	prevWorkers map[string]workerSample
}

//go:embed assets
var assets embed.FS

// New returns the dashboard reading and acting on the Tenure schema (Config.Schema) in pool,
// which must be migrated.
func New(pool *pgxpool.Pool, cfg *Config) (*Handler, error) {
	if pool == nil {
		return nil, ErrNilPool
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.Prefix = strings.TrimSuffix(c.Prefix, "/")
	if c.Prefix != "" && !strings.HasPrefix(c.Prefix, "/") {
		return nil, fmt.Errorf("%w: Prefix %q must start with /", ErrInvalidConfig, c.Prefix)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.EnableActions && c.Authorizer == nil {
		return nil, ErrNoAuthorizer
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.RefreshEvery, DefaultRefreshEvery)
	def(&c.WaitWindow, DefaultWaitWindow)
	def(&c.QueryTimeout, DefaultQueryTimeout)
	if c.QueryTimeout < time.Millisecond || c.QueryTimeout > 10*time.Minute {
		return nil, fmt.Errorf("%w: QueryTimeout %v is outside 1ms..10m", ErrInvalidConfig, c.QueryTimeout)
	}
	if c.RefreshEvery < time.Second {
		return nil, fmt.Errorf("%w: RefreshEvery %v is below 1s", ErrInvalidConfig, c.RefreshEvery)
	}
	if c.WaitWindow < 0 {
		return nil, fmt.Errorf("%w: WaitWindow must be > 0", ErrInvalidConfig)
	}
	for _, f := range []struct {
		name     string
		v        *int
		def, max int
	}{{"PageSize", &c.PageSize, DefaultPageSize, 500}, {"ScanWindow", &c.ScanWindow, DefaultScanWindow, 10_000_000},
		{"ScanWindows", &c.ScanWindows, DefaultScanWindows, 1000}, {"MaxBulk", &c.MaxBulk, DefaultMaxBulk, 10000},
		{"MaxRawBytes", &c.MaxRawBytes, DefaultMaxRawBytes, 1 << 30}} {
		if *f.v == 0 {
			*f.v = f.def
		}
		if *f.v < 1 || *f.v > f.max {
			return nil, fmt.Errorf("%w: %s %d is outside 1..%d", ErrInvalidConfig, f.name, *f.v, f.max)
		}
	}
	if c.MaxRawBytes < 1<<10 {
		return nil, fmt.Errorf("%w: MaxRawBytes %d is below 1 KiB", ErrInvalidConfig, c.MaxRawBytes)
	}
	if c.CSRFKey == nil {
		c.CSRFKey = make([]byte, 32)
		if _, err := rand.Read(c.CSRFKey); err != nil {
			return nil, err
		}
	}
	if len(c.CSRFKey) < 32 {
		return nil, fmt.Errorf("%w: CSRFKey must be at least 32 bytes", ErrInvalidConfig)
	}
	if c.Schema == "" && c.Client != nil {
		c.Schema = c.Client.Schema()
	}
	sch, err := dbschema.New(c.Schema)
	if err != nil {
		return nil, fmt.Errorf("%w: Schema: %w", ErrInvalidConfig, err)
	}
	c.Schema = sch.Name()
	if c.Client != nil && c.Client.Schema() != c.Schema {
		return nil, fmt.Errorf("%w: %w: Schema is %q, Client works in schema %q", ErrInvalidConfig, ErrSchemaMismatch, c.Schema, c.Client.Schema())
	}
	if c.Client == nil {
		cl, err := jobs.NewClient(pool, &jobs.Config{Logger: c.Logger, Schema: c.Schema})
		if err != nil {
			return nil, err
		}
		c.Client = cl
	}
	tmpl, err := template.New("").Funcs(funcs).ParseFS(assets, "assets/*.html")
	if err != nil {
		return nil, err
	}
	h := &Handler{cfg: c, pool: pool, sch: sch, q: uidb.New(sch.Wrap(pool)), client: c.Client, log: c.Logger, tmpl: tmpl, csrf: c.CSRFKey,
		prevWorkers: map[string]workerSample{}}
	static, _ := fs.Sub(assets, "assets/static")
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", staticHandler(static)))
	mux.HandleFunc("GET /{$}", h.overview)
	mux.HandleFunc("GET /jobs", h.jobsList)
	mux.HandleFunc("GET /jobs/{id}", h.jobDetail)
	mux.HandleFunc("GET /jobs/{id}/raw/{field}", h.jobRaw)
	mux.HandleFunc("POST /jobs/{id}/{action}", h.jobAction)
	mux.HandleFunc("POST /bulk", h.bulkAction)
	mux.HandleFunc("POST /queues/{name}/{action}", h.queueAction)
	mux.HandleFunc("GET /workflows/{id}", h.workflow)
	mux.HandleFunc("GET /sequences", h.sequence)
	h.mux = mux
	return h, nil
}

// ServeHTTP serves the dashboard under Config.Prefix.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	setSecurityHeaders(w)
	p := r.URL.Path
	if h.cfg.Prefix != "" {
		if p == h.cfg.Prefix {
			http.Redirect(w, r, h.cfg.Prefix+"/", http.StatusFound)
			return
		}
		rest, ok := strings.CutPrefix(p, h.cfg.Prefix+"/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + rest
		r2.URL.RawPath = ""
		r = r2
	}
	if r.Method == http.MethodPost {
		if !h.cfg.EnableActions {
			h.fail(w, r, http.StatusForbidden, errors.New("this dashboard is read-only (tenureui.Config.EnableActions is off)"))
			return
		}
		if err := crossOrigin.Check(r); err != nil {
			h.fail(w, r, http.StatusForbidden, fmt.Errorf("cross-origin request refused: %w", err))
			return
		}
		if err := h.checkCSRF(r); err != nil {
			h.fail(w, r, http.StatusForbidden, err)
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

var crossOrigin = http.NewCrossOriginProtection()

// setSecurityHeaders sets the strict Content-Security-Policy (no inline script or style, no
// framing, forms only to this origin) and related headers on every response.
func setSecurityHeaders(w http.ResponseWriter) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
}

func staticHandler(fsys fs.FS) http.Handler {
	fsrv := http.FileServerFS(fsys)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		fsrv.ServeHTTP(w, r)
	})
}

// fail renders an error page with status code.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, code int, err error) {
	if code >= 500 {
		h.log.ErrorContext(r.Context(), "tenureui: request failed", "path", r.URL.Path, "err", err)
	}
	h.render(w, r, code, "message", &page{Title: http.StatusText(code), Error: err.Error()})
}
