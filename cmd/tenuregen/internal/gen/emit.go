package gen

import (
	"bytes"
	"fmt"
	"go/format"
	"strconv"
	"strings"
	"time"
)

type importSpec struct{ name, path string }

// imports are the generated file's imports: standard library first, each group sorted.
func (m *model) imports() []importSpec {
	out := []importSpec{{"context", "context"}, {"errors", "errors"}, {"fmt", "fmt"}}
	if m.usesTime {
		out = append(out, importSpec{"time", "time"})
	}
	if m.usesUTF8 {
		out = append(out, importSpec{"utf8", "unicode/utf8"})
	}
	return append(out,
		importSpec{"pgxpool", "github.com/jackc/pgx/v5/pgxpool"},
		importSpec{"generics", "github.com/tenureq/tenure/generics"},
		importSpec{"jobs", "github.com/tenureq/tenure/jobs"},
		importSpec{"worker", "github.com/tenureq/tenure/worker"},
	)
}

// helperNames are the package-level names generated once per package.
func (m *model) helperNames() []string {
	out := []string{"Handlers", "NewInsertClient", "RegisterHandlers", "RegisterKinds", "tenureManyParams"}
	if m.usesIsZero {
		out = append(out, "tenureIsZero")
	}
	return out
}

type writer struct{ bytes.Buffer }

func (w *writer) p(format string, args ...any) {
	fmt.Fprintf(&w.Buffer, format, args...)
	w.WriteByte('\n')
}

// render writes the generated file, gofmt'ed.
func (m *model) render() ([]byte, error) {
	w := &writer{}
	w.p("%s", Header)
	w.p("")
	w.p("package %s", m.p.name)
	w.p("")
	w.p("import (")
	third := false
	for _, imp := range m.imports() {
		if !third && strings.Contains(imp.path, ".") {
			w.p("")
			third = true
		}
		if imp.name == lastElem(imp.path) || (imp.path == "github.com/jackc/pgx/v5" && imp.name == "pgx") {
			w.p("\t%q", imp.path)
		} else {
			w.p("\t%s %q", imp.name, imp.path)
		}
	}
	w.p(")")
	w.p("")
	w.p("// Job kinds declared by the //tenure:job directives of this package.")
	w.p("const (")
	for _, k := range m.kinds {
		w.p("\tKind%s = %q", k.ident, k.kind)
	}
	w.p(")")
	for _, k := range m.kinds {
		m.renderKind(w, k)
	}
	m.renderRegistration(w)
	m.renderHelpers(w)
	out, err := format.Source(w.Bytes())
	if err != nil {
		return nil, fmt.Errorf("tenuregen: internal error: generated code does not parse: %v\n%s", err, w.Bytes())
	}
	return out, nil
}

func lastElem(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[i+1:]
	}
	return path
}

// durExpr renders d as Go source using the time package's units.
func durExpr(d time.Duration) string {
	units := []struct {
		d    time.Duration
		name string
	}{{time.Hour, "time.Hour"}, {time.Minute, "time.Minute"}, {time.Second, "time.Second"},
		{time.Millisecond, "time.Millisecond"}, {time.Microsecond, "time.Microsecond"}}
	if d == 0 {
		return "0"
	}
	for _, u := range units {
		if d%u.d == 0 {
			if d == u.d {
				return u.name
			}
			return fmt.Sprintf("%d * %s", d/u.d, u.name)
		}
	}
	return fmt.Sprintf("time.Duration(%d)", int64(d))
}

// defaultsDoc describes a kind's enqueue defaults for doc comments.
func defaultsDoc(k *kindSpec) string {
	var parts []string
	if k.queue != "" {
		parts = append(parts, fmt.Sprintf("queue %q", k.queue))
	}
	if k.priority != 0 {
		parts = append(parts, fmt.Sprintf("priority %d", k.priority))
	}
	if k.maxAttempts != 0 {
		parts = append(parts, fmt.Sprintf("max attempts %d", k.maxAttempts))
	}
	if k.lease != 0 {
		parts = append(parts, fmt.Sprintf("lease %v", k.lease))
	}
	if k.unique != "" {
		u := "unique by kind"
		switch {
		case k.unique == "args":
			u += " and args"
		case len(k.uniqueFields) > 0:
			u += " and args " + strings.Join(k.uniqueFields, ", ")
		}
		if k.uniqueByQueue {
			u += " and queue"
		}
		if k.uniquePeriod != 0 {
			u += fmt.Sprintf(" per %v", k.uniquePeriod)
		}
		parts = append(parts, u)
	}
	return strings.Join(parts, ", ")
}

// kindDefaults is the body of the generics.KindDefaults literal of a kind's directive: its
// enqueue defaults, attempt timeout, retry backoff, uniqueness and delete on success.
func kindDefaults(k *kindSpec) string {
	var parts []string
	if k.queue != "" {
		parts = append(parts, fmt.Sprintf("Queue: %q", k.queue))
	}
	if k.priority != 0 {
		parts = append(parts, fmt.Sprintf("Priority: %d", k.priority))
	}
	if k.maxAttempts != 0 {
		parts = append(parts, fmt.Sprintf("MaxAttempts: %d", k.maxAttempts))
	}
	if k.lease != 0 {
		parts = append(parts, "Lease: "+durExpr(k.lease))
	}
	if k.timeout != 0 {
		parts = append(parts, "Timeout: "+durExpr(k.timeout))
	}
	if k.retryBase != 0 {
		parts = append(parts, "RetryBase: "+durExpr(k.retryBase))
	}
	if k.retryCap != 0 {
		parts = append(parts, "RetryCap: "+durExpr(k.retryCap))
	}
	if u := uniqueLiteral(k); u != "" {
		parts = append(parts, "Unique: "+u)
	}
	if k.deleteOnSuccess {
		parts = append(parts, "DeleteOnSuccess: true")
	}
	if len(parts) == 0 {
		return ""
	}
	return "\n\t\t" + strings.Join(parts, ",\n\t\t") + ",\n\t"
}

// uniqueLiteral is the *generics.UniqueDefaults literal of a kind's unique directives ("" when
// none).
func uniqueLiteral(k *kindSpec) string {
	if k.unique == "" {
		return ""
	}
	var u []string
	switch {
	case k.unique == "args":
		u = append(u, "ByArgs: true")
	case len(k.uniqueFields) > 0:
		q := make([]string, len(k.uniqueFields))
		for i, f := range k.uniqueFields {
			q[i] = strconv.Quote(f)
		}
		u = append(u, "Fields: []string{"+strings.Join(q, ", ")+"}")
	}
	if k.uniqueByQueue {
		u = append(u, "ByQueue: true")
	}
	if k.uniquePeriod != 0 {
		u = append(u, "ByPeriod: "+durExpr(k.uniquePeriod))
	}
	if len(k.uniqueStates) > 0 {
		s := make([]string, len(k.uniqueStates))
		for i, n := range k.uniqueStates { // state constant names: StateSucceeded -> "succeeded"
			s[i] = strconv.Quote(strings.ToLower(strings.TrimPrefix(n, "State")))
		}
		u = append(u, "States: []string{"+strings.Join(s, ", ")+"}")
	}
	return "&generics.UniqueDefaults{" + strings.Join(u, ", ") + "}"
}

func (m *model) renderKind(w *writer, k *kindSpec) {
	x, t := k.ident, k.typeName
	w.p("")
	w.p("// Kind implements generics.Args: kind %q.", k.kind)
	w.p("func (%s) Kind() string { return Kind%s }", t, x)
	w.p("")
	w.p("// PayloadVersion implements generics.Args.")
	w.p("func (%s) PayloadVersion() int { return %d }", t, k.version)
	w.p("")
	m.renderValidate(w, k)
	w.p("")
	if lit := kindDefaults(k); lit != "" {
		w.p("// Defaults implements generics.ArgsWithDefaults with the //tenure:job directive's defaults:")
		w.p("// every insert path (with or without a registry), worker.Register and tenure.enqueue (once a")
		w.p("// worker published them) apply them to what the insert or the handler options leave unset.")
		w.p("func (%s) Defaults() generics.KindDefaults {", t)
		w.p("\treturn generics.KindDefaults{%s}", lit)
		w.p("}")
	} else {
		w.p("// Defaults implements generics.ArgsWithDefaults: the //tenure:job directive declares no")
		w.p("// defaults, so the handler options' and then the package defaults apply.")
		w.p("func (%s) Defaults() generics.KindDefaults { return generics.KindDefaults{} }", t)
	}

	opts, optsDoc := "opts", "\n// opts may be nil."
	if k.hasDefaults() {
		optsDoc = fmt.Sprintf("\n// Zero fields of opts (which may be nil) take the kind's declared defaults (Defaults): %s.", defaultsDoc(k))
	}
	w.p("")
	w.p("// Enqueue%s validates args and enqueues one %q job in its own transaction and returns", x, k.kind)
	w.p("// the stored row (Duplicate: the row of the job that held its unique key).%s", optsDoc)
	w.p("func Enqueue%s(ctx context.Context, c *jobs.Client, args %s, opts *jobs.InsertOpts) (*jobs.InsertResult, error) {", x, t)
	w.p("\treturn c.Insert(ctx, args, %s)", opts)
	w.p("}")
	w.p("")
	w.p("// Enqueue%sTx validates args and enqueues one %q job inside tx: the job exists, and", x, k.kind)
	w.p("// workers are woken, only if tx commits. tx is a pgx.Tx or a jobs.SQLTx.%s", optsDoc)
	w.p("func Enqueue%sTx(ctx context.Context, c *jobs.Client, tx jobs.Tx, args %s, opts *jobs.InsertOpts) (*jobs.InsertResult, error) {", x, t)
	w.p("\treturn c.InsertTx(ctx, tx, args, %s)", opts)
	w.p("}")
	w.p("")
	w.p("// EnqueueMany%s validates every args value (one invalid value writes nothing) and enqueues", x)
	w.p("// one %q job per value in one transaction, returning one result per value in order.%s", k.kind, optsDoc)
	w.p("func EnqueueMany%s(ctx context.Context, c *jobs.Client, args []%s, opts *jobs.InsertOpts) ([]*jobs.InsertResult, error) {", x, t)
	w.p("\treturn c.InsertMany(ctx, tenureManyParams(args, %s))", opts)
	w.p("}")
	w.p("")
	w.p("// EnqueueMany%sTx is EnqueueMany%s inside tx.", x, x)
	w.p("func EnqueueMany%sTx(ctx context.Context, c *jobs.Client, tx jobs.Tx, args []%s, opts *jobs.InsertOpts) ([]*jobs.InsertResult, error) {", x, t)
	w.p("\treturn c.InsertManyTx(ctx, tx, tenureManyParams(args, %s))", opts)
	w.p("}")

	w.p("")
	w.p("// Register%s registers fn as the handler of kind %q on w, with the options of its", x, k.kind)
	w.p("// //tenure:job directive (the declared Defaults, which worker.Register applies, and")
	w.p("// max_snoozes) and its //tenure:upgrade functions. Each adjust function may change the")
	w.p("// options before registration (a value that contradicts Defaults is refused).")
	w.p("func Register%s(w *worker.Worker, fn func(ctx context.Context, job *generics.Job[%s]) error, adjust ...func(kind string, o *worker.HandlerOptions)) error {", x, t)
	if lit := handlerOptions(k); lit != "" {
		w.p("\to := &worker.HandlerOptions{%s}", lit)
	} else {
		w.p("\to := &worker.HandlerOptions{}")
	}
	w.p("\tfor _, f := range adjust {")
	w.p("\t\tf(Kind%s, o)", x)
	w.p("\t}")
	w.p("\tif err := worker.Register(w, fn, o); err != nil {")
	w.p("\t\treturn fmt.Errorf(\"tenure: register %%s: %%w\", Kind%s, err)", x)
	w.p("\t}")
	w.p("\treturn nil")
	w.p("}")

	if len(k.upgraders) > 0 {
		w.p("")
		w.p("// tenureUpgraders%s are the //tenure:upgrade functions of kind %q.", x, k.kind)
		w.p("func tenureUpgraders%s() []generics.Upgrader {", x)
		w.p("\treturn []generics.Upgrader{")
		for _, u := range k.upgraders {
			if u.raw {
				w.p("\t\tgenerics.UpgradeJSON(%d, %s),", u.from, u.fn)
			} else {
				w.p("\t\tgenerics.Upgrade(%d, %s),", u.from, u.fn)
			}
		}
		w.p("\t}")
		w.p("}")
	}
}

// handlerOptions is the body of the worker.HandlerOptions literal of a kind: what its
// declared defaults (Defaults) do not carry, the snooze bound and the upgraders.
func handlerOptions(k *kindSpec) string {
	var parts []string
	if k.maxSnoozes != 0 {
		parts = append(parts, fmt.Sprintf("MaxSnoozes: %d", k.maxSnoozes))
	}
	if len(k.upgraders) > 0 {
		parts = append(parts, "Upgraders: tenureUpgraders"+k.ident+"()")
	}
	if len(parts) == 0 {
		return ""
	}
	return "\n\t\t" + strings.Join(parts, ",\n\t\t") + ",\n\t"
}

func (m *model) renderValidate(w *writer, k *kindSpec) {
	t := k.typeName
	if len(k.fields) == 0 {
		w.p("// Validate implements generics.Validator. %s has no tenure rules.", t)
		w.p("func (%s) Validate() error { return nil }", t)
		return
	}
	w.p("// Validate implements generics.Validator with the tenure rules of %s's fields. Every field", t)
	w.p("// is checked; the first failing rule of each field is reported as a *generics.FieldError,")
	w.p("// and the failures are joined with errors.Join (nil when there are none).")
	w.p("func (a %s) Validate() error {", t)
	w.p("\tvar errs []error")
	for _, f := range k.fields {
		var chain []check
		if f.required {
			cond := f.zero
			if f.ptr {
				cond = "a." + f.goName + " == nil"
			}
			chain = append(chain, check{rule: ruleRequired, cond: cond, msg: "is required"})
		}
		chain = append(chain, f.checks...)
		if len(chain) == 0 {
			continue
		}
		indent := "\t"
		guard := ""
		switch {
		case f.ptr && !f.required:
			guard = "a." + f.goName + " != nil"
		case f.omitempty:
			guard = f.nonZero
		}
		if guard != "" {
			w.p("\tif %s {", guard)
			indent = "\t\t"
		}
		for i, c := range chain {
			if i == 0 {
				w.p("%sif %s {", indent, c.cond)
			} else {
				w.p("%s} else if %s {", indent, c.cond)
			}
			w.p("%s\terrs = append(errs, &generics.FieldError{Field: %q, Rule: %q, Msg: %q})", indent, f.jsonName, c.rule, c.msg)
		}
		w.p("%s}", indent)
		if guard != "" {
			w.p("\t}")
		}
	}
	w.p("\treturn errors.Join(errs...)")
	w.p("}")
}

func (m *model) renderRegistration(w *writer) {
	w.p("")
	w.p("// Handlers has one method per job kind of this package. A value that lacks one does not")
	w.p("// compile where it is passed to RegisterHandlers, so a kind cannot be left without a handler.")
	w.p("type Handlers interface {")
	for i, k := range m.kinds {
		if i > 0 {
			w.p("")
		}
		w.p("\t// %s handles kind %q.", k.ident, k.kind)
		w.p("\t%s(ctx context.Context, job *generics.Job[%s]) error", k.ident, k.typeName)
	}
	w.p("}")
	w.p("")
	w.p("// RegisterHandlers registers every kind of this package on w, with h's methods as handlers")
	w.p("// and the options of each kind's //tenure:job directive and //tenure:upgrade functions. Each")
	w.p("// adjust function may change a kind's options before registration. Call it before w.Start.")
	w.p("func RegisterHandlers(w *worker.Worker, h Handlers, adjust ...func(kind string, o *worker.HandlerOptions)) error {")
	w.p("\tif h == nil {")
	w.p("\t\treturn errors.New(\"tenure: RegisterHandlers: nil Handlers\")")
	w.p("\t}")
	for _, k := range m.kinds {
		w.p("\tif err := Register%s(w, h.%s, adjust...); err != nil {", k.ident, k.ident)
		w.p("\t\treturn err")
		w.p("\t}")
	}
	w.p("\treturn nil")
	w.p("}")
	w.p("")
	w.p("// RegisterKinds registers every kind of this package in r with its upgraders, for processes")
	w.p("// that enqueue without running a worker and want unregistered kinds refused: pass r as")
	w.p("// jobs.Config.Registry (the kinds' declared Defaults apply with or without it). A worker's")
	w.p("// registry is filled by RegisterHandlers instead.")
	w.p("func RegisterKinds(r *generics.Registry) error {")
	for _, k := range m.kinds {
		var opts []string
		if len(k.upgraders) > 0 {
			opts = append(opts, "generics.WithUpgrader(tenureUpgraders"+k.ident+"()...)")
		}
		args := "r"
		if len(opts) > 0 {
			args += ", " + strings.Join(opts, ", ")
		}
		w.p("\tif _, err := generics.Register[%s](%s); err != nil {", k.typeName, args)
		w.p("\t\treturn fmt.Errorf(\"tenure: register kind %%s: %%w\", Kind%s, err)", k.ident)
		w.p("\t}")
	}
	w.p("\treturn nil")
	w.p("}")
	w.p("")
	w.p("// NewInsertClient returns a jobs client for a process that enqueues this package's kinds")
	w.p("// without running a worker, in one call: cfg (nil means the defaults) with a registry")
	w.p("// filled by RegisterKinds, so unregistered kinds are refused (the declared defaults apply")
	w.p("// on every client). When cfg.Registry is set, this package's kinds are added to it (it must not")
	w.p("// hold them already: a worker's registry does, pass it to jobs.NewClient directly).")
	w.p("func NewInsertClient(pool *pgxpool.Pool, cfg *jobs.Config) (*jobs.Client, error) {")
	w.p("\tvar c jobs.Config")
	w.p("\tif cfg != nil {")
	w.p("\t\tc = *cfg")
	w.p("\t}")
	w.p("\tif c.Registry == nil {")
	w.p("\t\tc.Registry = generics.NewRegistry()")
	w.p("\t}")
	w.p("\tif err := RegisterKinds(c.Registry); err != nil {")
	w.p("\t\treturn nil, err")
	w.p("\t}")
	w.p("\treturn jobs.NewClient(pool, &c)")
	w.p("}")
}

func (m *model) renderHelpers(w *writer) {
	w.p("")
	w.p("// tenureManyParams pairs every args value with the same insert options.")
	w.p("func tenureManyParams[A generics.Args](args []A, opts *jobs.InsertOpts) []jobs.InsertManyParams {")
	w.p("\tparams := make([]jobs.InsertManyParams, len(args))")
	w.p("\tfor i := range args {")
	w.p("\t\tparams[i] = jobs.InsertManyParams{Args: args[i], Opts: opts}")
	w.p("\t}")
	w.p("\treturn params")
	w.p("}")
	if m.usesIsZero {
		w.p("")
		w.p("// tenureIsZero reports whether v is its type's zero value.")
		w.p("func tenureIsZero[T comparable](v T) bool {")
		w.p("\tvar zero T")
		w.p("\treturn v == zero")
		w.p("}")
	}
}
