package transporttest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/xadm/mensageria"
)

// The suite passes against a transport that keeps its messages in memory,
// doing what the contract asks and nothing more: the suite asks for no
// more than a transport owes, and each of its parts runs.
func TestSuiteOnMemoryTransport(t *testing.T) {
	Run(t, func(t *testing.T) *Harness {
		d := &memDestination{}
		return &Harness{
			NewSender: func(t *testing.T, log *slog.Logger) mensageria.Sender { return &memSender{d: d} },
			Received:  func(*testing.T) []Received { return d.received() },
			Classify:  memClassify,
			Classes: []Class{
				{Err: errMemDown, Want: Unavailable},
				{Err: errMemTooLarge, Want: Permanent},
				{Err: errors.New("something else"), Want: Retryable},
			},
			StartRefusals: []StartRefusal{{
				Name: "Missing",
				NewSender: func(t *testing.T, log *slog.Logger) mensageria.Sender {
					return &memSender{d: &memDestination{}, missingAtStart: true}
				},
				Is:   func(err error) bool { return errors.Is(err, errMemMissing) },
				Says: []string{"mem://orders", "create it"},
			}},
			Outage: &Outage{
				Down:       func(*testing.T) { d.down.Store(true) },
				Up:         func(*testing.T) { d.down.Store(false) },
				Says:       []string{"connection refused"},
				PausedSays: []string{"mem://orders"},
			},
			RouteFaults: []RouteFault{{
				Name:       "Missing",
				Begin:      func(*testing.T) { d.missing.Store(true) },
				End:        func(*testing.T) { d.missing.Store(false) },
				Says:       []string{"mem://orders", "missing"},
				PausedSays: []string{"missing"},
				Is:         func(err error) bool { return errors.Is(err, errMemMissing) },
			}},
			Poison:   &Poison{Payload: []byte(`{"pad":"too large"}`), Says: []string{"too large"}},
			Features: Features{ExactlyOnce: true, OrderedPerKey: true},
		}
	})
}

var (
	errMemDown     = errors.New("connection refused")
	errMemMissing  = errors.New("missing: create it")
	errMemTooLarge = errors.New("too large")
)

func memClassify(err error) error {
	switch {
	case errors.Is(err, errMemDown), errors.Is(err, errMemMissing):
		return mensageria.Unavailable(fmt.Errorf("mem://orders: %w", err))
	case errors.Is(err, errMemTooLarge):
		return mensageria.Permanent(err)
	}
	return err
}

// memDestination holds each message once, in arrival order.
type memDestination struct {
	down, missing atomic.Bool
	mu            sync.Mutex
	got           []Received
	seen          map[string]bool
}

func (d *memDestination) received() []Received {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Received(nil), d.got...)
}

type memSender struct {
	d              *memDestination
	missingAtStart bool
}

func (s *memSender) UseRelaySettings(mensageria.RelaySettings) error {
	if s.missingAtStart {
		return fmt.Errorf("mem://orders: %w", errMemMissing)
	}
	return nil
}

func (s *memSender) Send(ctx context.Context, d *mensageria.Delivery) error {
	if errs := s.SendBatch(ctx, []*mensageria.Delivery{d}); errs != nil {
		return errs[0]
	}
	return nil
}

func (s *memSender) SendBatch(_ context.Context, ds []*mensageria.Delivery) []error {
	errs := make([]error, len(ds))
	failed := false
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	for i, d := range ds {
		switch {
		case s.d.down.Load():
			errs[i] = errMemDown
		case s.d.missing.Load():
			errs[i] = errMemMissing
		case strings.Contains(string(d.Payload), `"pad"`):
			errs[i] = errMemTooLarge
		case !s.d.seen[d.ID.String()]:
			if s.d.seen == nil {
				s.d.seen = map[string]bool{}
			}
			s.d.seen[d.ID.String()] = true
			s.d.got = append(s.d.got, Received{ID: d.ID.String(), Key: d.Key, Payload: d.Payload})
		}
		if errs[i] != nil {
			errs[i], failed = memClassify(errs[i]), true
		}
	}
	if !failed {
		return nil
	}
	return errs
}
