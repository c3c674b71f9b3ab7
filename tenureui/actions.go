package tenureui

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
)

// authorize asks the Authorizer and checks the reason; it writes the error page and returns
// ok=false when the action may not proceed.
func (h *Handler) authorize(w http.ResponseWriter, r *http.Request, a Action) (jobs.Action, bool) {
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if reason == "" {
		h.fail(w, r, http.StatusBadRequest, errors.New("a reason is required: it is recorded in the audit trail"))
		return jobs.Action{}, false
	}
	if len(reason) > 2000 {
		h.fail(w, r, http.StatusBadRequest, errors.New("the reason is longer than 2000 bytes"))
		return jobs.Action{}, false
	}
	actor, err := h.cfg.Authorizer(r, a)
	if err == nil && actor == "" {
		err = errors.New("the authorizer named no actor")
	}
	if err != nil {
		h.log.WarnContext(r.Context(), "tenureui: action refused", "action", a, "err", err)
		h.fail(w, r, http.StatusForbidden, fmt.Errorf("%s refused: %w", a, err))
		return jobs.Action{}, false
	}
	return jobs.Action{Actor: actor, Reason: reason}, true
}

// statusOf maps an operator API error to an HTTP status.
func statusOf(err error) int {
	var se *jobs.StateError
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return http.StatusNotFound
	case errors.As(err, &se):
		return http.StatusConflict
	case errors.Is(err, jobs.ErrInvalidOptions), errors.Is(err, jobs.ErrMissingActor):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

func (h *Handler) outcome(w http.ResponseWriter, r *http.Request, msg string, links ...link) {
	p := h.newPage(w, r, "Done")
	p.Message, p.Links = msg, links
	h.render(w, r, http.StatusOK, "message", p)
}

func (h *Handler) jobAction(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("%q is not a job id", r.PathValue("id")))
		return
	}
	a := Action(r.PathValue("action"))
	switch a {
	case ActionCancel, ActionRetry, ActionReinject, ActionDelete:
	default:
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("unknown job action %q", a))
		return
	}
	act, ok := h.authorize(w, r, a)
	if !ok {
		return
	}
	ctx := r.Context()
	jobLink := link{fmt.Sprintf("%s/jobs/%d", h.cfg.Prefix, id), fmt.Sprintf("job %d", id)}
	var msg string
	switch a {
	case ActionCancel:
		var out jobs.CancelOutcome
		out, err = h.client.Cancel(ctx, id, act)
		msg = fmt.Sprintf("Job %d: %s (by %s).", id, strings.ReplaceAll(string(out), "_", " "), act.Actor)
	case ActionRetry:
		var row *generics.JobRow
		row, err = h.client.Retry(ctx, id, act)
		if err == nil {
			msg = fmt.Sprintf("Job %d will run now: state %s, run at %s (by %s).", id, row.State, row.RunAt.UTC().Format("15:04:05Z"), act.Actor)
		}
	case ActionReinject:
		var row *generics.JobRow
		row, err = h.client.Reinject(ctx, id, act, nil)
		if err == nil {
			msg = fmt.Sprintf("Job %d re-injected: state %s, %d attempts allowed (by %s).", id, row.State, row.MaxAttempts, act.Actor)
		}
	case ActionDelete:
		err = h.client.Delete(ctx, id, act)
		msg = fmt.Sprintf("Job %d deleted (by %s); the audit trail keeps its payload.", id, act.Actor)
		jobLink = link{h.cfg.Prefix + "/jobs", "jobs"}
	}
	if err != nil {
		h.fail(w, r, statusOf(err), fmt.Errorf("%s job %d: %w", a, id, err))
		return
	}
	h.outcome(w, r, msg, jobLink)
}

func (h *Handler) queueAction(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	a := Action(r.PathValue("action"))
	if a != ActionPause && a != ActionResume {
		h.fail(w, r, http.StatusNotFound, fmt.Errorf("unknown queue action %q", a))
		return
	}
	if !jobs.ValidQueueName(name) {
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("%q is not a valid queue name", name))
		return
	}
	act, ok := h.authorize(w, r, a)
	if !ok {
		return
	}
	var out jobs.PauseOutcome
	var err error
	if a == ActionPause {
		out, err = h.client.PauseQueue(r.Context(), name, act)
	} else {
		out, err = h.client.ResumeQueue(r.Context(), name, act)
	}
	if err != nil {
		h.fail(w, r, statusOf(err), fmt.Errorf("%s queue %q: %w", a, name, err))
		return
	}
	h.invalidate()
	h.outcome(w, r, fmt.Sprintf("Queue %s: %s (by %s).", name, out, act.Actor), link{h.cfg.Prefix + "/", "overview"})
}

// invalidate drops the shared overview snapshot so the next view shows an action's effect.
func (h *Handler) invalidate() {
	h.mu.Lock()
	h.snap = nil
	h.mu.Unlock()
}

// bulkAction re-injects the dead jobs, or cancels the ready or running jobs, of a filtered
// set: at most Config.MaxBulk of them, newest first, each through the operator API (so each
// is audited with the actor and the reason).
func (h *Handler) bulkAction(w http.ResponseWriter, r *http.Request) {
	q, err := parseListQuery(r.PostFormValue)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err)
		return
	}
	q.Before = 0
	a := Action(r.PostFormValue("action"))
	switch {
	case a == ActionBulkReinject && q.State != string(generics.JobStateDead):
		h.fail(w, r, http.StatusBadRequest, errors.New("bulk re-inject applies to a list filtered on state dead"))
		return
	case a == ActionBulkCancel && q.State != string(generics.JobStateReady) && q.State != string(generics.JobStateRunning):
		h.fail(w, r, http.StatusBadRequest, errors.New("bulk cancel applies to a list filtered on state ready or running"))
		return
	case a != ActionBulkReinject && a != ActionBulkCancel:
		h.fail(w, r, http.StatusBadRequest, fmt.Errorf("unknown bulk action %q", a))
		return
	}
	act, ok := h.authorize(w, r, a)
	if !ok {
		return
	}
	ctx := r.Context()
	res, err := h.list(ctx, q, h.cfg.MaxBulk)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	var done int
	var failures []string
	for _, j := range res.Jobs {
		var err error
		if a == ActionBulkReinject {
			_, err = h.client.Reinject(ctx, j.ID, act, nil)
		} else {
			_, err = h.client.Cancel(ctx, j.ID, act)
		}
		if err != nil {
			if ctx.Err() != nil {
				h.fail(w, r, http.StatusServiceUnavailable, fmt.Errorf("stopped after %d of %d jobs: %w", done, len(res.Jobs), ctx.Err()))
				return
			}
			failures = append(failures, fmt.Sprintf("job %d: %v", j.ID, err))
			continue
		}
		done++
	}
	verb := "re-injected"
	if a == ActionBulkCancel {
		verb = "cancelled (or cancel requested)"
	}
	msg := fmt.Sprintf("%s %d of %d matching jobs (by %s).", verb, done, len(res.Jobs), act.Actor)
	if len(res.Jobs) == h.cfg.MaxBulk {
		msg += fmt.Sprintf(" The set was bounded at %d (Config.MaxBulk): more may match; run it again.", h.cfg.MaxBulk)
	}
	if len(failures) > 0 {
		msg += fmt.Sprintf(" %d failed: %s", len(failures), strings.Join(failures[:min(len(failures), 10)], "; "))
	}
	h.invalidate()
	v := url.Values{}
	for k, s := range q.values() {
		if s != "" {
			v.Set(k, s)
		}
	}
	h.outcome(w, r, msg, link{h.cfg.Prefix + "/jobs?" + v.Encode(), "the list"})
}
