package m2mhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/xadm/mensageria"
)

// serveBatch takes a batch request whose body has been read: it refuses
// the request whole when the body is malformed or holds too many
// envelopes, refuses each malformed or unknown-type envelope on its own,
// and applies the rest through each type's Inbox.ApplyBatch, one
// transaction per type. The answer is 200 with one result per envelope.
func (rc *Receiver) serveBatch(w http.ResponseWriter, r *http.Request, body []byte, reqID string, refuse func(int, string, string, string, time.Duration)) {
	items, err := DecodeBatch(body, rc.maxBatch)
	if err != nil {
		var le *BatchLimitError
		if errors.As(err, &le) {
			refuse(http.StatusRequestEntityTooLarge, ProblemTooManyMessages, "Too many messages", fmt.Sprintf("a batch holds at most %d messages", le.Max), 0)
			return
		}
		refuse(http.StatusBadRequest, ProblemMalformed, "Malformed batch", err.Error(), 0)
		return
	}
	release, admitted := rc.admit(refuse)
	if !admitted {
		return
	}
	defer release()

	results := make([]BatchResult, len(items))
	var types []string // in order of first appearance
	byType := map[string][]int{}
	for i, it := range items {
		results[i].ID = it.ID
		if it.Err != nil {
			results[i].Status = ItemRefused
			results[i].Problem = &Problem{Type: ProblemMalformed, Title: "Malformed envelope", Status: http.StatusBadRequest, Detail: it.Err.Error(), RequestID: reqID}
			continue
		}
		typ := it.Envelope.Type
		if _, ok := rc.handlers[typ]; !ok {
			results[i].Status = ItemRefused
			results[i].Problem = &Problem{Type: ProblemUnknownType, Title: "Unknown message type", Status: http.StatusUnprocessableEntity,
				Detail: fmt.Sprintf("this receiver takes no messages of type %q", truncate(typ)), RequestID: reqID}
			continue
		}
		if _, seen := byType[typ]; !seen {
			types = append(types, typ)
		}
		byType[typ] = append(byType[typ], i)
	}
	for _, typ := range types {
		rc.applyBatch(r, rc.handlers[typ], items, byType[typ], reqID, results)
	}

	b, err := json.Marshal(batchAnswer{Results: results})
	if err != nil { // strings and ints always marshal
		panic(err)
	}
	w.Header().Set(headerContentType, ContentTypeBatch)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// batchItem is what the effect of one batch envelope sees in its context.
type batchItem struct {
	reqID string
	log   *slog.Logger
}

// applyBatch applies the envelopes items[idx] of one type in one inbox
// transaction and fills their results.
func (rc *Receiver) applyBatch(r *http.Request, h Handler, items []BatchItem, idx []int, batchID string, results []BatchResult) {
	ds := make([]*mensageria.Delivery, len(idx))
	meta := make(map[*mensageria.Delivery]batchItem, len(idx))
	for k, i := range idx {
		env := items[i].Envelope
		// Each envelope keeps the request id it would have had alone: its
		// own X-Request-Id header, else its id. The batch's request id is
		// logged beside it.
		rid := env.Headers[mensageria.HeaderRequestID]
		if !validRequestID(rid) {
			rid = env.ID.String()
		}
		log := rc.log.With("request_id", rid, "batch_request_id", batchID, "type", env.Type, "key", env.Key, "id", env.ID.String(), "attempt", env.Attempt)
		ds[k] = env.Delivery()
		meta[ds[k]] = batchItem{reqID: rid, log: log}
	}
	effect := guard(func(ctx context.Context, tx mensageria.Tx, d *mensageria.Delivery) error {
		m := meta[d]
		ctx = context.WithValue(ctx, keyRequestID, m.reqID)
		ctx = context.WithValue(ctx, keyLogger, m.log)
		return h.Effect(ctx, tx, d)
	})
	res, errs := h.Inbox.ApplyBatch(r.Context(), ds, effect)
	for k, i := range idx {
		m := meta[ds[k]]
		ctx := context.WithValue(r.Context(), keyRequestID, m.reqID)
		rc.report(ds[k].Type, res[k], errs[k])
		if errs[k] == nil {
			if res[k].Duplicate {
				m.log.DebugContext(ctx, "duplicate delivery absorbed", "first_id", res[k].FirstID.String())
				results[i].Status = ItemDuplicate
			} else {
				m.log.DebugContext(ctx, "message applied")
				results[i].Status = ItemApplied
			}
			continue
		}
		p, ra, status := rc.failure(ctx, m.log, errs[k], r.Context().Err() != nil, items[i].Envelope.Payload)
		p.RequestID = m.reqID
		results[i].Status, results[i].Problem = status, &p
		if ra > 0 {
			results[i].RetryAfter = int64((ra + time.Second - 1) / time.Second)
		}
	}
}
