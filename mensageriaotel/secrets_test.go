package mensageriaotel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/mensageriaotel"
)

// TestSpansCarryNoSecretOfAURL: a span leaves the process for a
// collector; the error of a failed attempt or effect it records shows no
// user-info password nor query string of a URL the error quotes.
func TestSpansCarryNoSecretOfAURL(t *testing.T) {
	const secret = "s3cr3t-gw-k3y"
	tr := newTraced(t)
	d := &mensageria.Delivery{ID: uuid.New(), Type: "order.placed", Key: "order-1", Attempt: 1, Headers: map[string]string{}}
	failed := fmt.Errorf(`Post "https://gw.example/in?api_key=%s": dial tcp: connection refused`, secret)
	_, end := tr.tracer.OnAttempt(context.Background(), mensageria.Attempt{App: "orders", Route: "orders → http https://gw.example/in?…", Delivery: d})
	end(mensageria.DeliveryEvent{Outcome: mensageria.OutcomeDead, Err: failed})
	err := tr.tracer.Process(context.Background(), mensageriaotel.Received{Type: d.Type, Key: d.Key, ID: d.ID.String(), Headers: d.Headers}, func(context.Context) error {
		return fmt.Errorf("calling postgres://app:%s@db/x: %w", secret, errors.ErrUnsupported)
	})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Process changed the effect's error: %v", err)
	}
	spans := tr.spans()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	for _, s := range spans {
		texts := []string{s.Status.Description}
		for _, ev := range s.Events {
			for _, a := range ev.Attributes {
				texts = append(texts, a.Value.Emit())
			}
		}
		for _, a := range s.Attributes {
			texts = append(texts, a.Value.Emit())
		}
		for _, text := range texts {
			if strings.Contains(text, secret) {
				t.Errorf("span %s carries the secret: %q", s.Name, text)
			}
		}
		if s.Status.Description == "" {
			t.Errorf("span %s records no error", s.Name)
		}
	}
}
