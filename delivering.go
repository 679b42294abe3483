package mensageria

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testsignal"
)

// batchSettler records the outcomes of a delivered batch.
type batchSettler interface {
	settle(b *claimed, ds []*Delivery, outs []outcome)
}

// attemptMarker records at-most-once attempts before they are sent (the
// driver's driver.AtMostOnce).
type attemptMarker interface {
	Mark(ctx context.Context, p driver.MarkParams) ([]int64, error)
}

// deliverer sends claimed batches through their routes' Senders and
// classifies each result into an outcome, which settling records.
type deliverer struct {
	cfg         *Config
	runCtx      context.Context
	routeOf     map[string]*route // type -> its route
	amo         attemptMarker     // nil unless a route is AtMostOnce
	settles     batchSettler
	routeEvents routeObserver
	jitter      *jitter
	onAttempt   []OnAttempt
	sem         chan struct{} // deliveries in flight

	deliveredSignal testsignal.Signal[int]
}

// outcome of one job inside a batch.
type outcome struct {
	kind    Outcome // "" = release
	err     error
	delay   time.Duration
	elapsed time.Duration
	// unsent: the route was not flowing, so the message was postponed
	// without being sent; no delivery event is reported for it.
	unsent bool
	// actx is the attempt's context as the Sender got it, and ends the
	// OnAttempt hooks' end functions (nil ones left out).
	actx context.Context
	ends []func(DeliveryEvent)
}

// started carries what startAttempt put in from onto o.
func (o outcome) started(from outcome) outcome {
	o.actx, o.ends = from.actx, from.ends
	return o
}

// sending is one batch on its way: the deliveries and their outcomes,
// filled in by the goroutines that send them.
type sending struct {
	ctx   context.Context // ends at the batch's deadline
	probe bool
	ds    []*Delivery
	outs  []outcome
	wg    sync.WaitGroup
}

// deliver sends b and has it settled. A row whose route no longer
// exists, or whose at-most-once mark failed, is left as release.
func (d *deliverer) deliver(b *claimed) {
	ctx, cancel := context.WithDeadline(d.runCtx, b.deadline)
	defer cancel()
	s := &sending{ctx: ctx, probe: b.probe, ds: make([]*Delivery, len(b.jobs)), outs: make([]outcome, len(b.jobs))}
	for i := range b.jobs {
		s.ds[i] = toDelivery(&b.jobs[i])
	}
	byType := map[string][]int{}
	var typeOrder []string
	// On at-most-once routes only the rows marked may be sent; the others
	// are left as release.
	// A row nothing could send, now or on any later attempt, is parked
	// dead alone, under this claim's lease, while the rest of the batch
	// goes (docs/adr/0024-unreadable-rows.md); it is never marked.
	bad := map[int]bool{}
	for i := range b.jobs {
		if why := unreadable(&b.jobs[i], s.ds[i]); why != "" {
			s.outs[i] = outcome{kind: OutcomeDead, err: &UnreadableRowError{ID: b.jobs[i].ID, Reason: why}}
			bad[i] = true
		}
	}
	marked := d.markOnce(b, bad)
	for i := range b.jobs {
		if bad[i] {
			continue
		}
		typ := b.jobs[i].Type
		rt, ok := d.cfg.Registry.Route(typ)
		route := d.routeOf[typ]
		if !ok || route == nil {
			// Never claimed on purpose; give it back to its owner untried.
			continue
		}
		if route.mode == AtMostOnce {
			if !marked[i] {
				continue
			}
			s.ds[i].AtMostOnce = true
		}
		if _, ok := rt.Sender.(BatchSender); ok {
			if byType[typ] == nil {
				typeOrder = append(typeOrder, typ)
			}
			byType[typ] = append(byType[typ], i)
			continue
		}
		d.sendOne(s, route, rt.Sender, i)
	}
	for _, typ := range typeOrder {
		rt, _ := d.cfg.Registry.Route(typ)
		d.sendBatch(s, d.routeOf[typ], rt.Sender.(BatchSender), byType[typ])
	}
	s.wg.Wait()
	d.deliveredSignal.Signal(len(b.jobs))
	d.settles.settle(b, s.ds, s.outs)
}

// sendOne sends the i-th delivery of s on its own goroutine, once the
// route's rate and the concurrency bound allow; one left out is released.
func (d *deliverer) sendOne(s *sending, route *route, sender Sender, i int) {
	if out, held := route.held(s.probe); held {
		s.outs[i] = out
		return
	}
	if route.pace != nil && !paced(s.ctx, route, 1) {
		return // left as release: the lease would not wait for the rate
	}
	select {
	case d.sem <- struct{}{}:
	case <-s.ctx.Done():
		return // left as release
	}
	// Looked at again once a slot is free: the deliveries before this
	// one may have paused the route meanwhile.
	if out, held := route.held(s.probe); held {
		<-d.sem
		s.outs[i] = out
		return
	}
	s.wg.Go(func() {
		defer func() { <-d.sem }()
		seen := route.answers()
		actx := d.startAttempt(s.ctx, &s.outs[i], route, s.ds[i], false)
		start := time.Now()
		err := safeSend(actx, sender, s.ds[i])
		s.outs[i] = d.outcomeOf(s.ctx, route, seen, s.ds[i], err).started(s.outs[i])
		s.outs[i].elapsed = time.Since(start)
	})
}

// sendBatch sends the deliveries idx of s in one SendBatch, as sendOne
// sends one.
func (d *deliverer) sendBatch(s *sending, route *route, sender BatchSender, idx []int) {
	if route.pace != nil && !paced(s.ctx, route, len(idx)) {
		return
	}
	select {
	case d.sem <- struct{}{}:
	case <-s.ctx.Done():
		return
	}
	if out, held := route.held(s.probe); held {
		<-d.sem
		for _, i := range idx {
			s.outs[i] = out
		}
		return
	}
	s.wg.Go(func() {
		defer func() { <-d.sem }()
		batch := make([]*Delivery, len(idx))
		for k, i := range idx {
			batch[k] = s.ds[i]
			d.startAttempt(s.ctx, &s.outs[i], route, s.ds[i], true)
		}
		seen := route.answers()
		start := time.Now()
		errs := safeSendBatch(s.ctx, sender, batch)
		for k, i := range idx {
			var err error
			if errs != nil {
				err = errs[k]
			}
			s.outs[i] = d.outcomeOf(s.ctx, route, seen, s.ds[i], err).started(s.outs[i])
			s.outs[i].elapsed = time.Since(start)
		}
	})
}

// startAttempt calls the OnAttempt hooks for dv, keeping their end
// functions in out, and returns the context Send gets.
func (d *deliverer) startAttempt(ctx context.Context, out *outcome, rt *route, dv *Delivery, batch bool) context.Context {
	out.actx = ctx
	if len(d.onAttempt) == 0 {
		return ctx
	}
	if dv.Headers == nil {
		dv.Headers = map[string]string{}
	}
	a := Attempt{App: d.cfg.App, Route: rt.name, Delivery: dv, Batch: batch}
	for _, h := range d.onAttempt {
		next, end := h.OnAttempt(out.actx, a)
		if next != nil {
			out.actx = next
		}
		if end != nil {
			out.ends = append(out.ends, end)
		}
	}
	if batch {
		return ctx
	}
	return out.actx
}

// held reports whether a claimed message must not be sent because its
// route stopped flowing after the claim (a probe batch is the exception
// it was claimed for), and what becomes of it: postponed, uncounted, to
// when the route will want it.
func (rt *route) held(probe bool) (outcome, bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	st := rt.br.state
	if st == RouteFlowing || (st == RouteProbing && probe) {
		return outcome{}, false
	}
	delay := rt.br.postpone(time.Now(), 0, nil)
	err := fmt.Errorf("not sent: route %s is %s (%s)", rt.name, st, rt.br.lastErr)
	return outcome{kind: OutcomePostponed, err: err, delay: delay, unsent: true}, true
}

// paced waits for the route's rate to allow n more messages; false when
// that would outlast the batch's deadline (or the relay stops).
func paced(ctx context.Context, rt *route, n int) bool {
	_, last := rt.pace.take(time.Now(), n)
	if dl, ok := ctx.Deadline(); ok && last.After(dl) {
		return false
	}
	d := time.Until(last)
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func toDelivery(j *driver.Job) *Delivery {
	d := &Delivery{
		ID:        uuid.UUID(j.MessageID),
		Type:      j.Type,
		Key:       j.Key,
		Payload:   j.Payload,
		CreatedAt: j.CreatedAt,
		Attempt:   j.Attempt,
		Seq:       j.ID,
	}
	d.Headers = decodeHeaders(j.Headers)
	return d
}

func safeSend(ctx context.Context, s Sender, d *Delivery) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("sender panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return s.Send(ctx, d)
}

func safeSendBatch(ctx context.Context, s BatchSender, ds []*Delivery) (errs []error) {
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("sender panicked: %v", p)
			errs = make([]error, len(ds))
			for i := range errs {
				errs[i] = err
			}
		}
	}()
	errs = s.SendBatch(ctx, ds)
	if errs != nil && len(errs) != len(ds) {
		err := fmt.Errorf("mensageria: SendBatch returned %d results for %d deliveries", len(errs), len(ds))
		errs = make([]error, len(ds))
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}

// outcomeOf classifies the result of sending dv under its route's mode.
func (d *deliverer) outcomeOf(ctx context.Context, rt *route, seen uint64, dv *Delivery, err error) outcome {
	if rt.mode == AtMostOnce {
		return d.classifyOnce(ctx, rt, seen, dv, err)
	}
	return d.classify(ctx, rt, seen, dv, err)
}

func (d *deliverer) classify(ctx context.Context, rt *route, seen uint64, dv *Delivery, err error) outcome {
	switch {
	case err == nil:
		c, h := rt.do(func(b *breaker) *change { return b.answer(time.Now()) })
		d.routeEvents.routeChanged(rt, c, h)
		return outcome{kind: OutcomeDelivered}
	case d.runCtx.Err() != nil:
		return outcome{err: err} // stopping: release, do not count
	case IsPermanent(err):
		// The destination answered about the message: it is up.
		c, h := rt.do(func(b *breaker) *change { return b.answer(time.Now()) })
		d.routeEvents.routeChanged(rt, c, h)
		return outcome{kind: OutcomeDead, err: err}
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("delivery ran past the lease: %w", err)
	}
	ra, _ := RetryAfterOf(err)
	if IsUnavailable(err) {
		var delay time.Duration
		counted := false
		c, h := rt.do(func(b *breaker) *change {
			now := time.Now()
			ch := b.fail(now, errText(err), ra)
			// The destination answered others while this one was on its
			// way: it is up, so the failure is the message's own.
			counted = b.answered != seen
			if !counted {
				delay = b.postpone(now, ra, d.backoffOf)
			}
			return ch
		})
		d.routeEvents.routeChanged(rt, c, h)
		if !counted {
			return outcome{kind: OutcomePostponed, err: err, delay: delay}
		}
	}
	if dv.Attempt >= d.cfg.MaxAttempts {
		return outcome{kind: OutcomeDead, err: fmt.Errorf("gave up after %d attempts: %w", dv.Attempt, err)}
	}
	return outcome{kind: OutcomeRetry, err: err, delay: d.backoffOf(dv.Attempt, ra)}
}

// backoffOf is the jittered delay after n failures, at least the
// destination's Retry-After (up to its ceiling).
func (d *deliverer) backoffOf(n int, retryAfter time.Duration) time.Duration {
	return d.jitter.backoff(d.cfg, n, retryAfter)
}

// markOnce records, before anything is sent, the attempt of the claim's
// rows on at-most-once routes, in one statement, and returns which of
// them may be sent. On an error none may: they are left as release,
// which also takes back a mark that committed unseen.
func (d *deliverer) markOnce(b *claimed, skip map[int]bool) map[int]bool {
	var idx []int
	var ids []int64
	for i := range b.jobs {
		if skip[i] {
			continue
		}
		if rt := d.routeOf[b.jobs[i].Type]; rt != nil && rt.mode == AtMostOnce {
			idx = append(idx, i)
			ids = append(ids, b.jobs[i].ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	ok := map[int]bool{}
	ctx, cancel := context.WithDeadline(d.runCtx, b.deadline)
	marked, err := d.amo.Mark(ctx, driver.MarkParams{Token: b.token, IDs: ids})
	cancel()
	if err != nil {
		if d.runCtx.Err() == nil {
			d.cfg.Logger.Warn("marking at-most-once attempts failed; those messages are not sent now and are given back", "app", d.cfg.App, "rows", len(ids), "err", err)
		}
		return ok
	}
	got := map[int64]bool{}
	for _, id := range marked {
		got[id] = true
	}
	for _, i := range idx {
		if got[b.jobs[i].ID] {
			ok[i] = true
		}
	}
	return ok
}

// classifyOnce is classify for an at-most-once route: only an answer, or
// a failure that proves the request never reached the receiver, is
// definite; anything else leaves the message in doubt.
func (d *deliverer) classifyOnce(ctx context.Context, rt *route, seen uint64, dv *Delivery, err error) outcome {
	switch {
	case err == nil, IsPermanent(err), IsNotSent(err):
		return d.classify(ctx, rt, seen, dv, err)
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("delivery ran past the lease or the relay stopped, after the request may have left: %w", err)
	}
	if IsUnavailable(err) {
		ra, _ := RetryAfterOf(err)
		c, h := rt.do(func(b *breaker) *change { return b.fail(time.Now(), errText(err), ra) })
		d.routeEvents.routeChanged(rt, c, h)
	}
	return outcome{kind: OutcomeInDoubt, err: fmt.Errorf("in doubt: the request may have reached the receiver: %w", err)}
}
