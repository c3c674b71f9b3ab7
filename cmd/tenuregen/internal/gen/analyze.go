package gen

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tenureq/tenure/jobs"
)

// model is the analyzed package: the kinds to generate, or the errors that prevent it.
type model struct {
	p     *pkg
	errs  ErrorList
	kinds []*kindSpec // sorted by type name

	// set while planning, read while rendering
	usesUTF8, usesIsZero, usesTime bool
}

func (m *model) errorf(pos token.Position, format string, args ...any) {
	m.errs = append(m.errs, &Error{Pos: pos, Msg: fmt.Sprintf(format, args...)})
}

func (m *model) pos(p token.Pos) token.Position { return m.p.fset.Position(p) }

const directivePrefix = "//tenure:"

// directive is one //tenure:NAME ARGS comment line.
type directive struct {
	name string
	args string
	pos  token.Position
	c    *ast.Comment
}

func directivesIn(cg *ast.CommentGroup, fset *token.FileSet) []directive {
	if cg == nil {
		return nil
	}
	var out []directive
	for _, c := range cg.List {
		if !strings.HasPrefix(c.Text, directivePrefix) {
			continue
		}
		rest := c.Text[len(directivePrefix):]
		name, args := rest, ""
		if i := strings.IndexAny(rest, " \t"); i >= 0 {
			name, args = rest[:i], rest[i+1:]
		}
		out = append(out, directive{name: name, args: strings.TrimSpace(args), pos: fset.Position(c.Slash), c: c})
	}
	return out
}

// kv is one key=value argument of a directive.
type kv struct{ key, value string }

// parseArgs splits "k=v k2=v2" and checks the keys against allowed.
func (m *model) parseArgs(d directive, allowed []string) ([]kv, bool) {
	ok := true
	seen := map[string]bool{}
	var out []kv
	for _, tok := range strings.Fields(d.args) {
		k, v, found := strings.Cut(tok, "=")
		switch {
		case !found:
			m.errorf(d.pos, "//tenure:%s: malformed argument %q: want key=value", d.name, tok)
			ok = false
			continue
		case k == "" || v == "":
			m.errorf(d.pos, "//tenure:%s: malformed argument %q: empty key or value", d.name, tok)
			ok = false
			continue
		case !contains(allowed, k):
			m.errorf(d.pos, "//tenure:%s: unknown key %q (known: %s)", d.name, k, strings.Join(allowed, ", "))
			ok = false
			continue
		case seen[k]:
			m.errorf(d.pos, "//tenure:%s: key %q given twice", d.name, k)
			ok = false
			continue
		}
		seen[k] = true
		out = append(out, kv{k, v})
	}
	return out, ok
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

var kindRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$`)

var jobKeys = []string{"kind", "version", "queue", "priority", "max_attempts", "lease", "timeout", "retry_base", "retry_cap",
	"max_snoozes", "unique", "unique_by_queue", "unique_period", "unique_states", "delete_on_success"}

// uniqueStateNames maps unique_states values to state constant names (generics.JobState...).
var uniqueStateNames = map[string]string{"succeeded": "StateSucceeded", "dead": "StateDead", "cancelled": "StateCancelled"}
var upgradeKeys = []string{"kind", "from"}

func analyze(p *pkg) *model {
	m := &model{p: p}
	used := map[*ast.Comment]bool{}
	var ups []*upgraderSpec
	for _, f := range p.files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.GenDecl:
				if d.Tok != token.TYPE {
					continue
				}
				for _, s := range d.Specs {
					spec := s.(*ast.TypeSpec)
					doc := spec.Doc
					if doc == nil && !d.Lparen.IsValid() {
						doc = d.Doc
					}
					var jobs []directive
					for _, dir := range directivesIn(doc, p.fset) {
						if dir.name == "job" {
							used[dir.c] = true
							jobs = append(jobs, dir)
						}
					}
					if len(jobs) > 1 {
						m.errorf(jobs[1].pos, "type %s has more than one //tenure:job directive", spec.Name.Name)
						continue
					}
					if len(jobs) == 1 {
						if k := m.jobType(jobs[0], spec); k != nil {
							m.kinds = append(m.kinds, k)
						}
					}
				}
			case *ast.FuncDecl:
				var list []directive
				for _, dir := range directivesIn(d.Doc, p.fset) {
					if dir.name == "upgrade" {
						used[dir.c] = true
						list = append(list, dir)
					}
				}
				if len(list) > 1 {
					m.errorf(list[1].pos, "function %s has more than one //tenure:upgrade directive", d.Name.Name)
					continue
				}
				if len(list) == 1 {
					if u := m.upgradeFunc(list[0], d); u != nil {
						ups = append(ups, u)
					}
				}
			}
		}
		// Directives anywhere else are mistakes.
		for _, cg := range f.Comments {
			for _, dir := range directivesIn(cg, p.fset) {
				if used[dir.c] {
					continue
				}
				switch dir.name {
				case "job":
					m.errorf(dir.pos, "//tenure:job must be in the doc comment of a type declaration (directly above `type T struct`, or above the type's line in a type group)")
				case "upgrade":
					m.errorf(dir.pos, "//tenure:upgrade must be in the doc comment of a function declaration")
				default:
					m.errorf(dir.pos, "unknown directive //tenure:%s (known: //tenure:job, //tenure:upgrade)", dir.name)
				}
			}
		}
	}
	sort.Slice(m.kinds, func(i, j int) bool { return m.kinds[i].typeName < m.kinds[j].typeName })
	m.checkKinds()
	m.linkUpgraders(ups)
	m.checkNames()
	if len(m.kinds) == 0 && len(m.errs) == 0 {
		m.errorf(token.Position{}, "tenuregen: no //tenure:job types in package %s (%s)", p.name, p.dir)
	}
	return m
}

// jobType reads a //tenure:job directive and its type.
func (m *model) jobType(d directive, spec *ast.TypeSpec) *kindSpec {
	name := spec.Name.Name
	k := &kindSpec{typeName: name, ident: upperFirst(name), pos: d.pos, version: 1}
	args, ok := m.parseArgs(d, jobKeys)
	for _, a := range args {
		bad := func(format string, xs ...any) {
			m.errorf(d.pos, "//tenure:job %s=%s: %s", a.key, a.value, fmt.Sprintf(format, xs...))
			ok = false
		}
		switch a.key {
		case "kind":
			if !kindRE.MatchString(a.value) {
				bad("a kind is 1..128 characters of letters, digits and _ . : / -, starting with a letter or digit")
			}
			k.kind = a.value
		case "version":
			n, err := strconv.Atoi(a.value)
			if err != nil || n < 1 || n > 1<<20 {
				bad("version must be an integer >= 1")
			}
			k.version = n
		case "queue":
			if !jobs.ValidQueueName(a.value) {
				bad("not a valid queue name (1..128 of letters, digits, _ . : -, starting with a letter or digit)")
			}
			k.queue = a.value
		case "priority":
			n, err := strconv.Atoi(a.value)
			if err != nil || n < 1 || n > jobs.PriorityMax {
				bad("priority must be an integer within 1..%d", jobs.PriorityMax)
			}
			k.priority = n
		case "max_attempts":
			n, err := strconv.Atoi(a.value)
			if err != nil || n < 1 || n > 1000 {
				bad("max_attempts must be an integer within 1..1000")
			}
			k.maxAttempts = n
		case "max_snoozes":
			n, err := strconv.Atoi(a.value)
			if err != nil || n < 1 || n > 1_000_000 {
				bad("max_snoozes must be an integer within 1..1000000")
			}
			k.maxSnoozes = n
		case "unique":
			k.unique = a.value
			if a.value != "kind" && a.value != "args" {
				for _, f := range strings.Split(a.value, ",") {
					if f == "" {
						bad("want kind, args or a comma-separated list of JSON field names")
						break
					}
					k.uniqueFields = append(k.uniqueFields, f)
				}
			}
		case "unique_by_queue":
			b, err := strconv.ParseBool(a.value)
			if err != nil {
				bad("want true or false")
			}
			k.uniqueByQueue = b
		case "delete_on_success":
			b, err := strconv.ParseBool(a.value)
			if err != nil {
				bad("want true or false")
			}
			k.deleteOnSuccess = b
		case "unique_period":
			dur, err := time.ParseDuration(a.value)
			if err != nil || dur < time.Second {
				bad("want a duration of at least 1s (e.g. 1h)")
			}
			k.uniquePeriod = dur
		case "unique_states":
			for _, s := range strings.Split(a.value, "|") {
				name, known := uniqueStateNames[s]
				if !known {
					bad("want states separated by |, among succeeded, dead, cancelled (ready and running always hold the key)")
					break
				}
				k.uniqueStates = append(k.uniqueStates, name)
			}
		case "lease", "timeout", "retry_base", "retry_cap":
			dur, err := time.ParseDuration(a.value)
			switch {
			case err != nil:
				bad("not a duration (e.g. 30s, 1m30s, 500ms)")
			case a.key == "lease" && (dur < time.Second || dur > 24*time.Hour):
				bad("a lease must be within 1s..24h")
			case dur <= 0 || dur > 24*time.Hour:
				bad("must be within (0, 24h]")
			}
			switch a.key {
			case "lease":
				k.lease = dur
			case "timeout":
				k.timeout = dur
			case "retry_base":
				k.retryBase = dur
			case "retry_cap":
				k.retryCap = dur
			}
		}
	}
	if k.kind == "" && ok {
		m.errorf(d.pos, "//tenure:job needs kind=NAME")
		ok = false
	}
	if k.retryBase > 0 && k.retryCap > 0 && k.retryBase > k.retryCap {
		m.errorf(d.pos, "//tenure:job retry_base=%v is above retry_cap=%v", k.retryBase, k.retryCap)
		ok = false
	}
	if k.unique == "" && (k.uniqueByQueue || k.uniquePeriod != 0 || len(k.uniqueStates) > 0) {
		m.errorf(d.pos, "//tenure:job unique_by_queue, unique_period and unique_states need unique=kind|args|FIELD,...")
		ok = false
	}
	if k.deleteOnSuccess && contains(k.uniqueStates, "StateSucceeded") {
		// generics.ErrDeleteOnSuccessUnique: the delete would drop the row that holds the key.
		m.errorf(d.pos, "//tenure:job delete_on_success=true with unique_states including succeeded: a deleted row cannot hold the unique key (generics.ErrDeleteOnSuccessUnique); drop one of them")
		ok = false
	}
	if k.lease+k.timeout+k.retryBase+k.retryCap+k.uniquePeriod > 0 {
		m.usesTime = true
	}

	if spec.Assign.IsValid() {
		m.errorf(d.pos, "//tenure:job type %s is an alias; declare a defined struct type", name)
		return nil
	}
	if spec.TypeParams != nil {
		m.errorf(d.pos, "//tenure:job type %s is generic; job args types cannot have type parameters", name)
		return nil
	}
	obj, _ := m.p.info.Defs[spec.Name].(*types.TypeName)
	if obj == nil {
		m.errorf(d.pos, "type %s could not be resolved", name)
		return nil
	}
	named, _ := obj.Type().(*types.Named)
	if named == nil {
		m.errorf(d.pos, "type %s is not a defined type", name)
		return nil
	}
	st, isStruct := named.Underlying().(*types.Struct)
	if !isStruct {
		m.errorf(d.pos, "//tenure:job type %s must be a struct, not %s", name, m.typeString(named.Underlying()))
		return nil
	}
	for i := 0; i < named.NumMethods(); i++ {
		if fn := named.Method(i); isGeneratedMethod(fn.Name()) {
			m.errorf(m.pos(fn.Pos()), "type %s declares method %s, which tenuregen generates from its //tenure:job directive: remove it", name, fn.Name())
			ok = false
		}
	}
	for i := 0; i < st.NumFields(); i++ {
		if fp := m.field(k, st.Field(i), st.Tag(i)); fp != nil {
			k.fields = append(k.fields, fp)
		}
	}
	for _, f := range k.uniqueFields {
		switch omit, found := jsonField(st, f); {
		case !found:
			m.errorf(d.pos, "//tenure:job unique=%s: %s has no JSON field %q", k.unique, name, f)
			ok = false
		case omit:
			m.errorf(d.pos, "//tenure:job unique=%s: field %q is omitempty, so it is missing from the payload when empty and the insert is refused; drop omitempty or the field from unique", k.unique, f)
			ok = false
		}
	}
	if !ok {
		return nil
	}
	return k
}

// jsonField reports whether the struct encodes a top-level JSON field named name (by its json
// tag, else its Go name; exported fields only), and whether that field is omitempty.
func jsonField(st *types.Struct, name string) (omitempty, found bool) {
	for i := 0; i < st.NumFields(); i++ {
		f := st.Field(i)
		if !f.Exported() || f.Embedded() {
			continue
		}
		tag, _ := reflect.StructTag(st.Tag(i)).Lookup("json")
		jname, opts, _ := strings.Cut(tag, ",")
		if jname == "-" && opts == "" {
			continue
		}
		if jname == "" {
			jname = f.Name()
		}
		if jname == name {
			return strings.Contains(","+opts+",", ",omitempty,"), true
		}
	}
	return false, false
}

func isGeneratedMethod(name string) bool {
	return name == "Kind" || name == "PayloadVersion" || name == "Validate" || name == "Defaults"
}

func upperFirst(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[n:]
}

func (m *model) typeString(t types.Type) string {
	return types.TypeString(t, types.RelativeTo(m.p.types))
}

// typeError returns the first type-checker error positioned inside [from, to).
func (m *model) typeError(from, to token.Pos) string {
	for _, e := range m.p.typeErrs {
		if e.Pos >= from && e.Pos < to {
			return e.Msg
		}
	}
	return ""
}

// field checks one struct field and plans its validation (nil when it has no rules).
func (m *model) field(k *kindSpec, f *types.Var, tag string) *fieldPlan {
	pos := m.pos(f.Pos())
	st := reflect.StructTag(tag)
	if isGeneratedMethod(f.Name()) {
		m.errorf(pos, "field %s.%s has the name of a method tenuregen generates (Kind, PayloadVersion, Validate, Defaults): rename it (keep its JSON name with a json tag)", k.typeName, f.Name())
	}
	jsonTag, _ := st.Lookup("json")
	jsonName, _, _ := strings.Cut(jsonTag, ",")
	skipped := jsonTag == "-"
	if jsonName == "" || skipped {
		jsonName = f.Name()
	}
	rules, hasRules := st.Lookup("tenure")
	encoded := f.Exported() && !skipped
	if hasInvalid(f.Type()) {
		msg := m.fieldTypeError(f)
		m.errorf(pos, "field %s.%s: its type does not resolve%s", k.typeName, f.Name(), msg)
		return nil
	}
	if encoded {
		if why := unencodable(f.Type()); why != "" {
			m.errorf(pos, "field %s.%s of type %s cannot be encoded as JSON (%s): unexport it or tag it json:\"-\"", k.typeName, f.Name(), m.typeString(f.Type()), why)
			return nil
		}
	}
	if !hasRules {
		return nil
	}
	switch {
	case f.Embedded():
		m.errorf(pos, "embedded field %s.%s: tenure tags on embedded fields are not supported; tag the fields of the embedded type's own args type", k.typeName, f.Name())
		return nil
	case !f.Exported():
		m.errorf(pos, "field %s.%s is unexported, so it is not encoded: it cannot carry tenure rules", k.typeName, f.Name())
		return nil
	case skipped:
		m.errorf(pos, "field %s.%s is tagged json:\"-\", so it is not encoded: it cannot carry tenure rules", k.typeName, f.Name())
		return nil
	}
	return m.planField(k, f, jsonName, rules, pos)
}

func isInvalid(t types.Type) bool {
	b, ok := t.(*types.Basic)
	return ok && b.Kind() == types.Invalid
}

// fieldTypeError finds the type checker's reason for a field type that did not resolve.
func (m *model) fieldTypeError(f *types.Var) string {
	for _, file := range m.p.files {
		if f.Pos() < file.Pos() || f.Pos() >= file.End() {
			continue
		}
		msg := ""
		ast.Inspect(file, func(n ast.Node) bool {
			fl, ok := n.(*ast.Field)
			if !ok || msg != "" {
				return msg == ""
			}
			match := fl.Type.Pos() <= f.Pos() && f.Pos() < fl.Type.End() // embedded
			for _, nm := range fl.Names {
				match = match || nm.Pos() == f.Pos()
			}
			if match {
				msg = m.typeError(fl.Type.Pos(), fl.Type.End())
				return false
			}
			return true
		})
		if msg != "" {
			return ": " + msg
		}
	}
	return ""
}

// hasInvalid reports whether t, or a type it is built from, did not resolve.
func hasInvalid(t types.Type) bool {
	for range 16 {
		switch u := t.(type) {
		case *types.Basic:
			return u.Kind() == types.Invalid
		case *types.Pointer:
			t = u.Elem()
		case *types.Slice:
			t = u.Elem()
		case *types.Array:
			t = u.Elem()
		case *types.Map:
			if hasInvalid(u.Key()) {
				return true
			}
			t = u.Elem()
		default:
			return false
		}
	}
	return false
}

// unencodable says why encoding/json cannot encode values of t ("" when it can), looking
// through pointers, slices, arrays and map values.
func unencodable(t types.Type) string {
	for range 16 {
		switch u := t.Underlying().(type) {
		case *types.Signature:
			return "func"
		case *types.Chan:
			return "chan"
		case *types.Basic:
			switch {
			case u.Info()&types.IsComplex != 0:
				return "complex number"
			case u.Kind() == types.UnsafePointer:
				return "unsafe.Pointer"
			}
			return ""
		case *types.Pointer:
			t = u.Elem()
		case *types.Slice:
			t = u.Elem()
		case *types.Array:
			t = u.Elem()
		case *types.Map:
			t = u.Elem()
		default:
			return ""
		}
	}
	return ""
}

// The tag rules.
const (
	ruleRequired  = "required"
	ruleOmitempty = "omitempty"
	ruleMin       = "min"
	ruleMax       = "max"
	ruleOneof     = "oneof"
)

var knownRules = []string{ruleRequired, ruleOmitempty, ruleMin, ruleMax, ruleOneof}

type rule struct{ name, value string }

// planField parses a tenure tag and turns it into checks on the field's type.
func (m *model) planField(k *kindSpec, f *types.Var, jsonName, tag string, pos token.Position) *fieldPlan {
	where := fmt.Sprintf("field %s.%s", k.typeName, f.Name())
	fail := func(format string, args ...any) *fieldPlan {
		m.errorf(pos, "%s: %s", where, fmt.Sprintf(format, args...))
		return nil
	}
	var rules []rule
	seen := map[string]bool{}
	if strings.TrimSpace(tag) == "" {
		return fail("empty tenure tag")
	}
	for _, item := range strings.Split(tag, ",") {
		item = strings.TrimSpace(item)
		name, value, hasValue := strings.Cut(item, "=")
		switch {
		case item == "":
			return fail("empty rule in tenure tag %q", tag)
		case !contains(knownRules, name):
			return fail("unknown rule %q in tenure tag (known: %s)", name, strings.Join(knownRules, ", "))
		case seen[name]:
			return fail("rule %q given twice", name)
		case (name == ruleRequired || name == ruleOmitempty) && hasValue:
			return fail("rule %q takes no value", name)
		case name != ruleRequired && name != ruleOmitempty && strings.TrimSpace(value) == "":
			return fail("rule %q needs a value (%s=...)", name, name)
		}
		seen[name] = true
		rules = append(rules, rule{name, strings.TrimSpace(value)})
	}
	fp := &fieldPlan{goName: f.Name(), jsonName: jsonName}
	fp.required, fp.omitempty = seen[ruleRequired], seen[ruleOmitempty]
	if fp.required && fp.omitempty {
		return fail("rules required and omitempty contradict each other")
	}
	t := f.Type()
	typeDesc := m.typeString(t)
	val := "a." + f.Name()
	if p, ok := t.Underlying().(*types.Pointer); ok {
		fp.ptr = true
		t = p.Elem()
		val = "*a." + f.Name()
		if fp.omitempty {
			return fail("omitempty on a pointer field is implied: its rules apply only when it is not nil")
		}
	}
	hasChecks := len(rules) > btoi(fp.required)+btoi(fp.omitempty)
	if fp.omitempty && !hasChecks {
		return fail("omitempty has no effect without other rules")
	}
	if fp.ptr && hasChecks {
		if _, ok := t.Underlying().(*types.Pointer); ok {
			return fail("rules other than required do not apply to a pointer to a pointer (%s)", typeDesc)
		}
	}
	if (fp.required && !fp.ptr) || fp.omitempty {
		z, nz, why := m.zeroConds(t, val)
		if why != "" {
			r := ruleRequired
			if fp.omitempty {
				r = ruleOmitempty
			}
			return fail("rule %s cannot apply to type %s: %s", r, typeDesc, why)
		}
		fp.zero, fp.nonZero = z, nz
	}
	var minV, maxV *bound
	for _, r := range rules {
		switch r.name {
		case ruleMin, ruleMax:
			b, c, err := m.boundCheck(r, t, val)
			if err != "" {
				return fail("%s (field type %s)", err, typeDesc)
			}
			if r.name == ruleMin {
				minV = b
			} else {
				maxV = b
			}
			fp.checks = append(fp.checks, c)
		case ruleOneof:
			c, err := m.oneofCheck(r, t, val)
			if err != "" {
				return fail("%s (field type %s)", err, typeDesc)
			}
			fp.checks = append(fp.checks, c)
		}
	}
	if minV != nil && maxV != nil && minV.cmp(maxV) > 0 {
		return fail("min=%s is above max=%s", minV.text, maxV.text)
	}
	return fp
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// zeroConds returns conditions true when v (of type t) is zero and non-zero, or why there
// are none.
func (m *model) zeroConds(t types.Type, v string) (zero, nonZero, why string) {
	switch u := t.Underlying().(type) {
	case *types.Basic:
		switch {
		case u.Info()&types.IsString != 0:
			return v + ` == ""`, v + ` != ""`, ""
		case u.Info()&types.IsNumeric != 0:
			return v + " == 0", v + " != 0", ""
		case u.Info()&types.IsBoolean != 0:
			return "", "", "false is a bool's zero value, so a missing bool cannot be told from false; use *bool"
		}
		return "", "", "unsupported basic type"
	case *types.Slice, *types.Map:
		return "len(" + v + ") == 0", "len(" + v + ") != 0", ""
	case *types.Interface, *types.Pointer:
		return v + " == nil", v + " != nil", ""
	case *types.Struct, *types.Array:
		if m.hasIsZero(t) {
			recv := v
			if strings.HasPrefix(v, "*") {
				recv = "(" + v + ")"
			}
			return recv + ".IsZero()", "!" + recv + ".IsZero()", ""
		}
		if types.Comparable(t) {
			m.usesIsZero = true
			return "tenureIsZero(" + v + ")", "!tenureIsZero(" + v + ")", ""
		}
		return "", "", "it is not comparable and has no IsZero() bool method"
	}
	return "", "", "its zero value cannot be checked"
}

func (m *model) hasIsZero(t types.Type) bool {
	obj, _, _ := types.LookupFieldOrMethod(t, true, m.p.types, "IsZero")
	fn, ok := obj.(*types.Func)
	if !ok {
		return false
	}
	sig := fn.Type().(*types.Signature)
	if sig.Params().Len() != 0 || sig.Results().Len() != 1 {
		return false
	}
	b, ok := sig.Results().At(0).Type().(*types.Basic)
	return ok && b.Kind() == types.Bool
}

// bound is a parsed min/max value, comparable with another of the same field.
type bound struct {
	text string
	f    float64 // ints, lengths and durations fit well enough for ordering min/max
	i    int64
	u    uint64
	kind byte // 'i' int, 'u' uint, 'f' float
}

func (a *bound) cmp(b *bound) int {
	switch a.kind {
	case 'i':
		return cmpOrdered(a.i, b.i)
	case 'u':
		return cmpOrdered(a.u, b.u)
	}
	return cmpOrdered(a.f, b.f)
}

func cmpOrdered[T int64 | uint64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func isDuration(t types.Type) bool {
	n, ok := t.(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "time" && n.Obj().Name() == "Duration"
}

// boundCheck plans a min or max rule: a value bound on numbers, a length bound on strings
// (in characters) and slices.
func (m *model) boundCheck(r rule, t types.Type, v string) (*bound, check, string) {
	op, word := "<", "least"
	if r.name == ruleMax {
		op, word = ">", "most"
	}
	c := check{rule: r.name}
	switch u := t.Underlying().(type) {
	case *types.Basic:
		info := u.Info()
		switch {
		case info&types.IsString != 0:
			n, err := strconv.ParseInt(r.value, 10, 32)
			if err != nil || n < 0 {
				return nil, c, fmt.Sprintf("%s=%s: a string length must be a non-negative integer", r.name, r.value)
			}
			m.usesUTF8 = true
			c.cond = fmt.Sprintf("utf8.RuneCountInString(%s) %s %d", v, op, n)
			c.msg = fmt.Sprintf("must have at %s %d character%s", word, n, plural(n))
			return &bound{text: r.value, i: n, kind: 'i'}, c, ""
		case isDuration(t):
			d, err := time.ParseDuration(r.value)
			if err != nil {
				n, err2 := strconv.ParseInt(r.value, 10, 64)
				if err2 != nil {
					return nil, c, fmt.Sprintf("%s=%s: not a duration (e.g. 1s, 500ms) or a number of nanoseconds", r.name, r.value)
				}
				d = time.Duration(n)
			}
			m.usesTime = true
			c.cond = fmt.Sprintf("%s %s %s", v, op, durExpr(d))
			c.msg = fmt.Sprintf("must be at %s %v", word, d)
			return &bound{text: r.value, i: int64(d), kind: 'i'}, c, ""
		case info&types.IsInteger != 0 && info&types.IsUnsigned != 0:
			n, err := strconv.ParseUint(r.value, 10, 64)
			if err != nil || n > uintMax(u.Kind()) {
				return nil, c, fmt.Sprintf("%s=%s: not an integer within 0..%d", r.name, r.value, uintMax(u.Kind()))
			}
			c.cond = fmt.Sprintf("%s %s %d", v, op, n)
			c.msg = fmt.Sprintf("must be at %s %d", word, n)
			return &bound{text: r.value, u: n, kind: 'u'}, c, ""
		case info&types.IsInteger != 0:
			lo, hi := intRange(u.Kind())
			n, err := strconv.ParseInt(r.value, 10, 64)
			if err != nil || n < lo || n > hi {
				return nil, c, fmt.Sprintf("%s=%s: not an integer within %d..%d", r.name, r.value, lo, hi)
			}
			c.cond = fmt.Sprintf("%s %s %d", v, op, n)
			c.msg = fmt.Sprintf("must be at %s %d", word, n)
			return &bound{text: r.value, i: n, kind: 'i'}, c, ""
		case info&types.IsFloat != 0:
			f, err := strconv.ParseFloat(r.value, 64)
			limit := 1.7976931348623157e308
			if u.Kind() == types.Float32 {
				limit = 3.4028234663852886e38
			}
			if err != nil || f != f || f > limit || f < -limit {
				return nil, c, fmt.Sprintf("%s=%s: not a finite number", r.name, r.value)
			}
			lit := strconv.FormatFloat(f, 'g', -1, 64)
			c.cond = fmt.Sprintf("%s %s %s", v, op, lit)
			c.msg = fmt.Sprintf("must be at %s %s", word, lit)
			return &bound{text: r.value, f: f, kind: 'f'}, c, ""
		}
	case *types.Slice:
		n, err := strconv.ParseInt(r.value, 10, 32)
		if err != nil || n < 0 {
			return nil, c, fmt.Sprintf("%s=%s: a slice length must be a non-negative integer", r.name, r.value)
		}
		c.cond = fmt.Sprintf("len(%s) %s %d", v, op, n)
		c.msg = fmt.Sprintf("must have at %s %d element%s", word, n, plural(n))
		return &bound{text: r.value, i: n, kind: 'i'}, c, ""
	}
	return nil, c, fmt.Sprintf("rule %s needs a number, a string or a slice", r.name)
}

func plural(n int64) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func intRange(k types.BasicKind) (int64, int64) {
	switch k {
	case types.Int8:
		return -1 << 7, 1<<7 - 1
	case types.Int16:
		return -1 << 15, 1<<15 - 1
	case types.Int32:
		return -1 << 31, 1<<31 - 1
	}
	return -1 << 63, 1<<63 - 1
}

func uintMax(k types.BasicKind) uint64 {
	switch k {
	case types.Uint8:
		return 1<<8 - 1
	case types.Uint16:
		return 1<<16 - 1
	case types.Uint32:
		return 1<<32 - 1
	}
	return 1<<64 - 1
}

// oneofCheck plans a oneof rule on a string or integer field.
func (m *model) oneofCheck(r rule, t types.Type, v string) (check, string) {
	c := check{rule: r.name}
	u, ok := t.Underlying().(*types.Basic)
	if !ok || u.Info()&(types.IsString|types.IsInteger) == 0 {
		return c, "rule oneof needs a string or integer field"
	}
	values := strings.Split(r.value, "|")
	seen := map[string]bool{}
	var conds, shown []string
	for _, x := range values {
		x = strings.TrimSpace(x)
		if x == "" {
			return c, fmt.Sprintf("oneof=%s: empty value (separate values with |)", r.value)
		}
		if seen[x] {
			return c, fmt.Sprintf("oneof=%s: value %q listed twice", r.value, x)
		}
		seen[x] = true
		lit := strconv.Quote(x)
		if u.Info()&types.IsInteger != 0 {
			if u.Info()&types.IsUnsigned != 0 {
				n, err := strconv.ParseUint(x, 10, 64)
				if err != nil || n > uintMax(u.Kind()) {
					return c, fmt.Sprintf("oneof=%s: %q is not an integer within 0..%d", r.value, x, uintMax(u.Kind()))
				}
				lit = strconv.FormatUint(n, 10)
			} else {
				lo, hi := intRange(u.Kind())
				n, err := strconv.ParseInt(x, 10, 64)
				if err != nil || n < lo || n > hi {
					return c, fmt.Sprintf("oneof=%s: %q is not an integer within %d..%d", r.value, x, lo, hi)
				}
				lit = strconv.FormatInt(n, 10)
			}
		}
		conds = append(conds, v+" != "+lit)
		shown = append(shown, x)
	}
	c.cond = strings.Join(conds, " && ")
	c.msg = "must be one of: " + strings.Join(shown, ", ")
	return c, ""
}

// upgradeFunc reads a //tenure:upgrade directive and checks its function's signature.
func (m *model) upgradeFunc(d directive, fd *ast.FuncDecl) *upgraderSpec {
	u := &upgraderSpec{fn: fd.Name.Name, pos: d.pos}
	args, ok := m.parseArgs(d, upgradeKeys)
	hasFrom := false
	for _, a := range args {
		switch a.key {
		case "kind":
			u.kind = a.value
		case "from":
			n, err := strconv.Atoi(a.value)
			if err != nil || n < 1 {
				m.errorf(d.pos, "//tenure:upgrade from=%s: from must be an integer >= 1 (the stored version this function upgrades to from+1)", a.value)
				ok = false
			}
			u.from, hasFrom = n, true
		}
	}
	if ok && (u.kind == "" || !hasFrom) {
		m.errorf(d.pos, "//tenure:upgrade needs kind=NAME and from=N")
		ok = false
	}
	fnPos := m.pos(fd.Name.Pos())
	if fd.Recv != nil {
		m.errorf(fnPos, "//tenure:upgrade %s is a method; an upgrader must be a plain function", fd.Name.Name)
		return nil
	}
	if fd.Type.TypeParams != nil {
		m.errorf(fnPos, "//tenure:upgrade %s is generic; an upgrader must be a plain function", fd.Name.Name)
		return nil
	}
	obj, _ := m.p.info.Defs[fd.Name].(*types.Func)
	if obj == nil {
		m.errorf(fnPos, "function %s could not be resolved", fd.Name.Name)
		return nil
	}
	sig := obj.Type().(*types.Signature)
	const want = "func(old OldArgs) (NewArgs, error) or func(old json.RawMessage) (json.RawMessage, error)"
	if sig.Variadic() || sig.Params().Len() != 1 || sig.Results().Len() != 2 ||
		!types.Identical(sig.Results().At(1).Type(), types.Universe.Lookup("error").Type()) {
		m.errorf(fnPos, "//tenure:upgrade %s has signature %s; want %s", fd.Name.Name, m.typeString(sig), want)
		return nil
	}
	in, out := sig.Params().At(0).Type(), sig.Results().At(0).Type()
	for _, t := range []types.Type{in, out} {
		if isInvalid(t) {
			m.errorf(fnPos, "//tenure:upgrade %s: its signature does not resolve", fd.Name.Name)
			return nil
		}
		if why := unencodable(t); why != "" {
			m.errorf(fnPos, "//tenure:upgrade %s: type %s cannot be encoded as JSON (%s)", fd.Name.Name, m.typeString(t), why)
			return nil
		}
	}
	u.raw = isRawMessage(in) && isRawMessage(out)
	if !u.raw && (isRawMessage(in) || isRawMessage(out)) {
		m.errorf(fnPos, "//tenure:upgrade %s mixes json.RawMessage with a typed value; want %s", fd.Name.Name, want)
		return nil
	}
	if !ok {
		return nil
	}
	return u
}

func isRawMessage(t types.Type) bool {
	n, ok := t.(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "encoding/json" && n.Obj().Name() == "RawMessage"
}

// checkKinds rejects duplicate kinds.
func (m *model) checkKinds() {
	byKind := map[string]*kindSpec{}
	// report the later declaration (by position) as the duplicate
	ordered := append([]*kindSpec(nil), m.kinds...)
	sort.SliceStable(ordered, func(i, j int) bool { return posLess(ordered[i].pos, ordered[j].pos) })
	for _, k := range ordered {
		if prev, dup := byKind[k.kind]; dup {
			m.errorf(k.pos, "duplicate kind %q: type %s and type %s (%s:%d) both declare it", k.kind, k.typeName, prev.typeName, prev.pos.Filename, prev.pos.Line)
			continue
		}
		byKind[k.kind] = k
	}
}

func posLess(a, b token.Position) bool {
	if a.Filename != b.Filename {
		return a.Filename < b.Filename
	}
	return a.Line < b.Line
}

// linkUpgraders attaches each upgrader to its kind and checks that the versions form a chain
// ending at the kind's version.
func (m *model) linkUpgraders(ups []*upgraderSpec) {
	byKind := map[string]*kindSpec{}
	for _, k := range m.kinds {
		if _, dup := byKind[k.kind]; !dup {
			byKind[k.kind] = k
		}
	}
	sort.SliceStable(ups, func(i, j int) bool { return posLess(ups[i].pos, ups[j].pos) })
	for _, u := range ups {
		k := byKind[u.kind]
		if k == nil {
			m.errorf(u.pos, "//tenure:upgrade %s: no //tenure:job type has kind %q", u.fn, u.kind)
			continue
		}
		if u.from >= k.version {
			m.errorf(u.pos, "//tenure:upgrade %s: from=%d is not below the version %d of kind %q (type %s): an upgrader turns version from into from+1", u.fn, u.from, k.version, k.kind, k.typeName)
			continue
		}
		dup := false
		for _, o := range k.upgraders {
			if o.from == u.from {
				m.errorf(u.pos, "//tenure:upgrade %s: kind %q already has an upgrader from=%d (%s)", u.fn, u.kind, u.from, o.fn)
				dup = true
			}
		}
		if !dup {
			k.upgraders = append(k.upgraders, u)
		}
	}
	for _, k := range m.kinds {
		if len(k.upgraders) == 0 {
			continue
		}
		sort.Slice(k.upgraders, func(i, j int) bool { return k.upgraders[i].from < k.upgraders[j].from })
		have := map[int]bool{}
		for _, u := range k.upgraders {
			have[u.from] = true
		}
		for v := k.upgraders[0].from; v < k.version; v++ {
			if !have[v] {
				m.errorf(k.pos, "kind %q (version %d) has upgraders from version %d but none from=%d: stored payloads of version %d..%d could not reach version %d", k.kind, k.version, k.upgraders[0].from, v, k.upgraders[0].from, v, k.version)
				break
			}
		}
	}
}

// checkNames rejects package-level declarations that the generated file would redeclare.
func (m *model) checkNames() {
	if m.p.types == nil {
		return
	}
	owner := map[string]string{}
	for _, k := range m.kinds {
		what := "generated for type " + k.typeName
		for _, n := range kindNames(k) {
			if prev, dup := owner[n]; dup {
				m.errorf(k.pos, "type %s would generate %s, which is also %s: rename one of the types", k.typeName, n, prev)
				break
			}
			owner[n] = what
		}
	}
	for _, n := range m.helperNames() {
		owner[n] = "a generated declaration"
	}
	for _, imp := range m.imports() {
		owner[imp.name] = "an import name of the generated file"
	}
	names := make([]string, 0, len(owner))
	for n := range owner {
		names = append(names, n)
	}
	sort.Strings(names)
	scope := m.p.types.Scope()
	for _, n := range names {
		obj := scope.Lookup(n)
		if obj == nil {
			continue
		}
		m.errorf(m.pos(obj.Pos()), "%s is declared here but is also %s: rename it", n, owner[n])
	}
}

// kindNames are the package-level names generated for kind k.
func kindNames(k *kindSpec) []string {
	x := k.ident
	names := []string{"Kind" + x, "Enqueue" + x, "Enqueue" + x + "Tx", "EnqueueMany" + x, "EnqueueMany" + x + "Tx", "Register" + x}
	if len(k.upgraders) > 0 {
		names = append(names, "tenureUpgraders"+x)
	}
	return names
}
