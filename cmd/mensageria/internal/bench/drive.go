package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
)

// What the scenarios share: a relay to time, producers at a steady rate, a
// sink run until it has applied what was put in front of it.

// newRelay builds a client whose relay delivers typ to s at its defaults,
// with claims of batchSize (0: the default). The client finds what s needs
// (the election's events, the relay's settings) in its registry.
func newRelay(d driver.Driver, typ string, s mensageria.Sender, batchSize int, hooks ...mensageria.Hook) (*mensageria.Client, error) {
	return mensageria.New(d, &mensageria.Config{
		App:       relayApp(typ),
		Registry:  mensageria.NewRegistry().MustRegister(typ, s),
		Hooks:     hooks,
		BatchSize: batchSize,
		Logger:    quiet(),
	})
}

// pace calls enqueue(i) for every i below total at rate a second, i at
// start + i/rate, spread over pacers goroutines so that one slow commit
// does not hold back the ones behind it. It returns how long the pacing
// took, or the first error.
func pace(ctx context.Context, rate, total, pacers int, enqueue func(ctx context.Context, i int) error) (time.Duration, error) {
	interval := time.Second / time.Duration(rate)
	errs := make(chan error, pacers)
	var wg sync.WaitGroup
	start := time.Now()
	for p := range pacers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < total; i += pacers {
				if w := time.Until(start.Add(time.Duration(i) * interval)); w > 0 {
					time.Sleep(w)
				}
				if err := enqueue(ctx, i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	select {
	case err := <-errs:
		return took, err
	default:
		return took, ctx.Err()
	}
}

// awaitSink runs a sink until applied() reaches records, stops it, and
// reports its rate since start and the transaction latencies in lat.
func awaitSink(ctx context.Context, scenario string, run func(context.Context) error, applied func() int64, records int, start time.Time, lat *Latencies) (Result, error) {
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- run(runCtx) }()
	for applied() < int64(records) {
		select {
		case err := <-errc:
			return Result{}, fmt.Errorf("sink stopped: %v", err)
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	stop()
	<-errc
	r := Result{Scenario: scenario}
	r.Set("msgs/s", float64(records)/elapsed.Seconds())
	r.setPercentiles("tx-", lat)
	return r, nil
}

// commitToArrival is the latency of every message i from committed[i] to
// arrived[i], both in Unix nanoseconds. A message can arrive before its
// producer notes the commit time: that counts as no latency, one below the
// clock's resolution.
func commitToArrival(committed, arrived []atomic.Int64) *Latencies {
	var lat Latencies
	for i := range committed {
		lat.Add(time.Duration(max(arrived[i].Load()-committed[i].Load(), 0)))
	}
	return &lat
}
