package m2mhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria"
)

// BatchSender is a Sender that also implements mensageria.BatchSender:
// the relay hands it the messages of one type in a claimed batch, and it
// POSTs them as one batch request (application/vnd.mensageria.batch+json,
// split by SenderConfig.MaxBatchItems and MaxBatchBytes), so the receiver
// applies them in one inbox transaction per type instead of one per
// message. That commit is what bounds an HTTP route's throughput.
//
// Each envelope's result maps to the relay's outcome exactly as the same
// envelope's answer would alone: applied and duplicate are delivered,
// refused and stale are dead with the problem as reason, retry is
// retried (retry_after honoured) as the message's own outcome, since the
// receiver answered and chose it for that envelope. An answer to the
// request as a whole that is not a 200 batch answer (a network error, a
// timeout, 401, 3xx, 5xx, 429 ...) is classified as for a single request
// and given to every envelope of the request: about the destination
// (Unavailable) for a network error, a timeout, 5xx, 429, 401 and 407. A receiver that answers 415 does not
// take batches (an older version, say): the BatchSender then sends each
// envelope of that request on its own.
//
// Send, inherited from Sender, still delivers one message per request.
type BatchSender struct {
	*Sender
	maxItems int
	maxBytes int
}

// NewBatchSender validates cfg and returns its BatchSender.
func NewBatchSender(cfg SenderConfig) (*BatchSender, error) {
	s, err := NewSender(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.MaxBatchItems == 0 {
		cfg.MaxBatchItems = 100
	}
	if cfg.MaxBatchItems < 0 {
		return nil, &mensageria.ConfigError{Field: "MaxBatchItems", Reason: "must be at least 1"}
	}
	if cfg.MaxBatchBytes == 0 {
		cfg.MaxBatchBytes = 1 << 20
	}
	if cfg.MaxBatchBytes < 0 {
		return nil, &mensageria.ConfigError{Field: "MaxBatchBytes", Reason: "must be at least 1"}
	}
	return &BatchSender{Sender: s, maxItems: cfg.MaxBatchItems, maxBytes: cfg.MaxBatchBytes}, nil
}

// SendBatch delivers ds in as few batch requests as the limits allow and
// returns one error per delivery, index-aligned with ds.
func (s *BatchSender) SendBatch(ctx context.Context, ds []*mensageria.Delivery) []error {
	errs := make([]error, len(ds))
	type chunk struct {
		idx  []int
		envs [][]byte
		size int
	}
	var chunks []*chunk
	var cur *chunk
	for i, d := range ds {
		b, err := EncodeEnvelope(d)
		if err != nil {
			errs[i] = mensageria.Permanent(err)
			continue
		}
		if cur == nil || len(cur.idx) >= s.maxItems || cur.size+1+len(b) > s.maxBytes {
			cur = &chunk{size: batchOverhead}
			chunks = append(chunks, cur)
		}
		cur.idx = append(cur.idx, i)
		cur.envs = append(cur.envs, b)
		cur.size += len(b) + 1
	}
	var wg sync.WaitGroup
	for _, c := range chunks {
		wg.Go(func() {
			cds := make([]*mensageria.Delivery, len(c.idx))
			for k, i := range c.idx {
				cds[k] = ds[i]
			}
			for k, err := range s.post(ctx, cds, EncodeBatch(c.envs)) {
				errs[c.idx[k]] = err
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		errs[i] = s.secrets.Error(err)
	}
	return errs
}

// errUnsupported: the receiver answered a batch with 415.
var errUnsupported = errors.New("batch not supported")

// post sends one batch request and returns one error per delivery.
func (s *BatchSender) post(ctx context.Context, ds []*mensageria.Delivery, body []byte) []error {
	errs, err := s.exchange(ctx, ds, body)
	if errors.Is(err, errUnsupported) {
		// The receiver takes single envelopes only.
		errs = make([]error, len(ds))
		var wg sync.WaitGroup
		for i, d := range ds {
			wg.Go(func() { errs[i] = s.Send(ctx, d) })
		}
		wg.Wait()
		return errs
	}
	if err != nil {
		errs = make([]error, len(ds))
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}

// exchange POSTs the batch and reads its answer: per-item errors, or one
// error for the whole request.
func (s *BatchSender) exchange(ctx context.Context, ds []*mensageria.Delivery, body []byte) ([]error, error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, mensageria.Unavailable(fmt.Errorf("POST %s: waiting for one of the %d requests in flight to it: %w", s.shown, cap(s.sem), ctx.Err()))
	}
	defer func() { <-s.sem }()

	cut := s.timeout.limit(ctx)
	ctx, cancel := context.WithTimeout(ctx, s.timeout.get())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return nil, mensageria.Permanent(fmt.Errorf("build request: %w", err))
	}
	h := req.Header
	h.Set(headerContentType, ContentTypeBatch)
	h.Set("Accept", ContentTypeBatch+", "+contentTypeProblem)
	h.Set(headerAuthorization, s.auth)
	// One id per exchange; each envelope carries its own request id in
	// its headers, which the receiver gives its effect.
	h.Set(mensageria.HeaderRequestID, uuid.Must(uuid.NewV7()).String())

	resp, err := s.client.Do(req)
	if err != nil {
		return nil, s.transportError(ctx, cut, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnsupportedMediaType {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProblemBodyBytes))
		return nil, errUnsupported
	}
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return nil, classify(resp, time.Now())
	}
	// The receiver may have applied every envelope by now: an answer that
	// cannot be read is retried, and the inbox absorbs the redelivery.
	limit := int64(maxProblemBodyBytes) + int64(len(ds))*(maxProblemBodyBytes/4)
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("POST %s: reading the batch answer: %w", s.shown, err)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get(headerContentType)); mt != ContentTypeBatch {
		return nil, fmt.Errorf("POST %s: http %d answer to a batch is %q, not %s", s.shown, resp.StatusCode, truncate(mt), ContentTypeBatch)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("POST %s: batch answer larger than %d bytes", s.shown, limit)
	}
	errs, err := decodeBatchAnswer(b, ds)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", s.shown, err)
	}
	return errs, nil
}

// decodeBatchAnswer reads a receiver's batch answer into one outcome per
// delivery, or refuses it whole.
func decodeBatchAnswer(b []byte, ds []*mensageria.Delivery) ([]error, error) {
	var a batchAnswer
	if err := json.Unmarshal(b, &a); err != nil || len(a.Results) != len(ds) {
		return nil, fmt.Errorf("malformed batch answer: %d results for %d messages", len(a.Results), len(ds))
	}
	errs := make([]error, len(ds))
	for i, r := range a.Results {
		errs[i] = itemError(ds[i], r)
	}
	return errs, nil
}

// itemError classifies one result of a batch answer as the same answer
// to a single request would be.
func itemError(d *mensageria.Delivery, r BatchResult) error {
	if r.ID != "" && r.ID != d.ID.String() {
		return fmt.Errorf("batch answer names message %s in the place of %s", truncate(r.ID), d.ID)
	}
	status := 0
	switch r.Status {
	case ItemApplied, ItemDuplicate:
		return nil
	case ItemRefused:
		status = http.StatusUnprocessableEntity
	case ItemStale:
		status = http.StatusConflict
	case ItemRetry:
		status = http.StatusServiceUnavailable
	default:
		return fmt.Errorf("batch answer: unknown status %q", truncate(r.Status))
	}
	se := &StatusError{StatusCode: status}
	if p := r.Problem; p != nil {
		if p.Status >= 400 && p.Status < 600 && Retryable(p.Status) == Retryable(status) {
			se.StatusCode = p.Status
		}
		q := *p
		q.Title, q.Detail, q.RequestID = truncate(q.Title), truncate(q.Detail), truncate(q.RequestID)
		se.Problem = &q
	}
	if r.Status != ItemRetry {
		return mensageria.Permanent(se)
	}
	if r.RetryAfter > 0 {
		return mensageria.RetryAfter(se, time.Duration(min(r.RetryAfter, int64(maxRetryAfter/time.Second)))*time.Second)
	}
	return se
}

var _ mensageria.BatchSender = (*BatchSender)(nil)
