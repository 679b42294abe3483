package console

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/xadm/mensageria/ops"
	"github.com/xadm/mensageria/redact"
)

// Messages in doubt (docs/adr/0015-at-most-once.md): rows of an
// at-most-once route whose attempt may have reached the receiver. Nothing
// but a reconcile probe or an operator moves them on; the console lists
// them per type and resolves them as the `doubt resolve` command does,
// through the dead-letter actions' guards (authentication, CSRF, read-only,
// the console's apps).

// ResolutionView is one recorded decision about a message in doubt.
type ResolutionView struct {
	Outcome string    `json:"outcome"`
	By      string    `json:"by"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

func resolutionViews(recs []ops.Resolution) []ResolutionView {
	out := make([]ResolutionView, 0, len(recs))
	for _, r := range recs {
		out = append(out, ResolutionView{Outcome: string(r.Outcome), By: r.By, Reason: redact.Text(r.Reason), At: r.At})
	}
	return out
}

// ResolveRequest is the body of POST /api/doubt/resolve: messages in doubt
// by id, what happened to them, and why. Who decides is the logged-in
// operator, never the body.
type ResolveRequest struct {
	IDs     []int64 `json:"ids"`
	Outcome string  `json:"outcome"`
	Reason  string  `json:"reason"`
}

// maxReason bounds the recorded reason.
const maxReason = 2000

// DecodeResolve decodes a resolve body into the operator's decision, with By
// left to the caller. It selects by ids only (positive, distinct, at most
// maxActionIDs): a decision about what reached a receiver is taken one
// message at a time, or for messages the operator picked, never for a
// whole type blind. The outcome is one of delivered, retry, dead and the
// reason is required.
func DecodeResolve(body io.Reader) (ops.Decision, error) {
	var q ResolveRequest
	if err := decodeJSON(body, &q); err != nil {
		return ops.Decision{}, err
	}
	if len(q.IDs) == 0 {
		return ops.Decision{}, badRequest("select messages in doubt: ids")
	}
	if len(q.IDs) > maxActionIDs {
		return ops.Decision{}, badRequest("at most %d ids per resolution", maxActionIDs)
	}
	seen := make(map[int64]bool, len(q.IDs))
	for _, id := range q.IDs {
		if id <= 0 {
			return ops.Decision{}, badRequest("id %d is not a message id", id)
		}
		if seen[id] {
			return ops.Decision{}, badRequest("id %d is listed twice", id)
		}
		seen[id] = true
	}
	o := ops.Outcome(q.Outcome)
	if o != ops.OutcomeDelivered && o != ops.OutcomeRetry && o != ops.OutcomeDead {
		return ops.Decision{}, badRequest("outcome %q is none of delivered (the receiver has the effect), retry (it does not: one more attempt), dead", q.Outcome)
	}
	reason := strings.TrimSpace(q.Reason)
	if reason == "" {
		return ops.Decision{}, badRequest("a reason is required: the decision is recorded for whoever looks at the message later")
	}
	if len(reason) > maxReason {
		return ops.Decision{}, badRequest("the reason is longer than %d bytes", maxReason)
	}
	return ops.Decision{IDs: slices.Clone(q.IDs), Outcome: o, Reason: reason}, nil
}

// ResolveResult is what POST /api/doubt/resolve answers: the ids resolved,
// and those left alone because they were not in doubt (settled already,
// being probed or sent, or no such row).
type ResolveResult struct {
	By         string  `json:"by"`
	Resolved   []int64 `json:"resolved"`
	NotInDoubt []int64 `json:"not_in_doubt"`
}

func (c *Console) atMostOnce(w http.ResponseWriter, r *http.Request) bool {
	ok := c.every.AtMostOnce()
	if !ok {
		problem(w, r, http.StatusNotImplemented, "no_at_most_once", "this database's driver keeps no messages in doubt (no at-most-once support)")
	}
	return ok
}

func (c *Console) doubtList(w http.ResponseWriter, r *http.Request, _ principal) {
	if !c.atMostOnce(w, r) {
		return
	}
	c.listOf(w, r, ops.StateInDoubt, "messages in doubt")
}

func (c *Console) resolve(w http.ResponseWriter, r *http.Request, p principal) {
	if !c.atMostOnce(w, r) {
		return
	}
	if !jsonBody(r) {
		problem(w, r, http.StatusUnsupportedMediaType, "unsupported_media_type", "send the resolution as application/json")
		return
	}
	rp, err := DecodeResolve(r.Body)
	if err != nil {
		problem(w, r, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	rp.By = p.by
	o := c.scoped
	plan, err := o.PlanResolve(r.Context(), rp)
	if err != nil {
		c.refused(w, r, err)
		return
	}
	res, err := o.Apply(r.Context(), plan)
	if err != nil {
		c.refused(w, r, err)
		return
	}
	c.counts.invalidate()
	c.opt.Logger.Info("console: messages in doubt resolved", "outcome", rp.Outcome, "by", rp.By, "reason", rp.Reason, "resolved", res.Resolved, "not_in_doubt", res.NotInDoubt)
	writeJSON(w, ResolveResult{By: rp.By, Resolved: orEmpty(res.Resolved), NotInDoubt: orEmpty(res.NotInDoubt)})
}

func orEmpty(ids []int64) []int64 {
	if ids == nil {
		return []int64{}
	}
	return ids
}
