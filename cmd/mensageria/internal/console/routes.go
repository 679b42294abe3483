package console

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/xadm/mensageria/ops"
)

// PauseView is an operator's pause of a type as the page shows it.
type PauseView struct {
	PausedBy string    `json:"paused_by"`
	Reason   string    `json:"reason"`
	PausedAt time.Time `json:"paused_at"`
}

func pauseView(p *ops.RoutePause) *PauseView {
	if p == nil {
		return nil
	}
	return &PauseView{PausedBy: p.PausedBy, Reason: p.Reason, PausedAt: p.PausedAt.UTC()}
}

// PauseRequest is the body of POST /api/routes/pause and (Reason unused)
// /api/routes/resume.
type PauseRequest struct {
	Type   string `json:"type"`
	Reason string `json:"reason"`
}

// DecodePause reads a pause (needReason) or resume request: a type, and
// for a pause a reason, each bounded as the drivers bound them.
func DecodePause(body io.Reader, needReason bool) (PauseRequest, error) {
	var q PauseRequest
	if err := decodeJSON(body, &q); err != nil {
		return PauseRequest{}, err
	}
	q.Reason = strings.TrimSpace(q.Reason)
	if !needReason {
		q.Reason = ""
	}
	reason := q.Reason
	if !needReason {
		reason = "-" // a resume carries none; the type is checked alone
	}
	if needReason && reason == "" {
		return PauseRequest{}, badRequest("a reason is required: the pause is shown with it to everyone who wonders why the type's messages wait")
	}
	var pe *ops.PauseRouteError
	if err := ops.CheckPause(q.Type, "-", reason); errors.As(err, &pe) {
		return PauseRequest{}, badRequest("%s %s", pe.Field, pe.Reason)
	}
	return q, nil
}

// PauseResult is what POST /api/routes/pause and /resume answer.
type PauseResult struct {
	Type string `json:"type"`
	App  string `json:"app"`
	PauseView
}

func (c *Console) pauseRoute(w http.ResponseWriter, r *http.Request, p principal) {
	c.routeAction(w, r, p, true)
}

func (c *Console) resumeRoute(w http.ResponseWriter, r *http.Request, p principal) {
	c.routeAction(w, r, p, false)
}

func (c *Console) routeAction(w http.ResponseWriter, r *http.Request, p principal, pause bool) {
	if !jsonBody(r) {
		problem(w, r, http.StatusUnsupportedMediaType, "unsupported_media_type", "send the request as application/json")
		return
	}
	q, err := DecodePause(r.Body, pause)
	if err != nil {
		problem(w, r, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	o := c.scoped
	var got ops.RoutePause
	if pause {
		got, err = o.PauseRoute(r.Context(), q.Type, p.by, q.Reason)
	} else {
		got, err = o.ResumeRoute(r.Context(), q.Type)
	}
	var pe *ops.PauseRouteError
	switch {
	case errors.As(err, &pe):
		problem(w, r, http.StatusBadRequest, "bad_request", err.Error())
		return
	case errors.Is(err, ops.ErrNotFound):
		what := "is not in the ownership catalog"
		if !pause {
			what = "is not paused"
		}
		problem(w, r, http.StatusNotFound, "not_found", fmt.Sprintf("message type %q %s; nothing changed", q.Type, what))
		return
	case errors.Is(err, ops.ErrNoRoutePause):
		problem(w, r, http.StatusNotImplemented, "not_supported", "this database's driver records no route pauses")
		return
	case err != nil:
		c.refused(w, r, err)
		return
	}
	if pause {
		c.opt.Logger.Info("console: route paused", "type", got.Type, "app", got.App, "by", p.by, "reason", got.Reason)
	} else {
		c.opt.Logger.Info("console: route resumed", "type", got.Type, "app", got.App, "by", p.by, "was_paused_by", got.PausedBy)
	}
	writeJSON(w, PauseResult{Type: got.Type, App: got.App, PauseView: *pauseView(&got)})
}
