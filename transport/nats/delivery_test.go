package nats

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"

	"github.com/xadm/mensageria"
)

// What the Sender publishes reads back as the delivery it was, user
// headers and enqueue time included; the server's own headers are not the
// delivery's.
func TestDeliveryFromWhatTheSenderPublished(t *testing.T) {
	s := &Sender{cfg: SenderConfig{Subject: "orders"}}
	s.subjectFor = func(*mensageria.Delivery) string { return "orders" }
	d := deliveries("order", 1, 1)[0]
	d.Headers = map[string]string{mensageria.HeaderRequestID: "req-1"}
	d.CreatedAt = time.Date(2026, 11, 30, 9, 0, 0, 5, time.FixedZone("BRT", -3*3600))
	m := s.toMsg(d)
	m.Header.Set("Nats-Expected-Stream", "ORDERS")
	got, err := deliveryFrom(m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != d.ID || got.Type != d.Type || got.Key != d.Key || string(got.Payload) != string(d.Payload) ||
		!got.CreatedAt.Equal(d.CreatedAt) || !maps.Equal(got.Headers, d.Headers) {
		t.Fatalf("deliveryFrom = %+v, want %+v", got, d)
	}
}

func TestDeliveryFromRefusesForeignMessages(t *testing.T) {
	id := uuid.Must(uuid.NewV7()).String()
	for name, h := range map[string]natsgo.Header{
		"no headers":        nil,
		"id not a uuid":     {HeaderMessageID: {"42"}, HeaderType: {"order"}},
		"no type":           {HeaderMessageID: {id}},
		"created-at wrong":  {HeaderMessageID: {id}, HeaderType: {"order"}, HeaderCreatedAt: {"yesterday"}},
		"created-at year 0": {HeaderMessageID: {id}, HeaderType: {"order"}, HeaderCreatedAt: {"0000-01-01T00:00:00+01:00"}},
	} {
		_, err := deliveryFrom(h, []byte(`{}`))
		var de *mensageria.DecodeError
		if !errors.Is(err, mensageria.ErrInvalidMessage) || !errors.As(err, &de) || de.Transport != "nats" || de.Field == "" {
			t.Errorf("%s: %v, want a *mensageria.DecodeError naming its field", name, err)
		}
	}
}

// Messages come from the network: whatever their headers, deliveryFrom
// returns a delivery or a DecodeError, and a delivery it returns survives
// the Sender's encoding unchanged.
func FuzzDeliveryFrom(f *testing.F) {
	f.Add("0192f7a0-7b3c-7def-8123-456789abcdef", "order.created", "k-1", "2026-11-30T12:00:00.5Z", []byte(`{"n":1}`), "Traceparent", "00-a-b-01")
	f.Add("", "", "", "", []byte(nil), "", "")
	f.Add("0192f7a0-7b3c-7def-8123-456789abcdef", "t", "", "0000-01-01T00:00:00+01:00", []byte("x"), "Nats-Msg-Id", "y")
	s := &Sender{}
	s.subjectFor = func(*mensageria.Delivery) string { return "s" }
	f.Fuzz(func(t *testing.T, id, typ, key, created string, data []byte, hk, hv string) {
		h := natsgo.Header{}
		for k, v := range map[string]string{HeaderMessageID: id, HeaderType: typ, HeaderKey: key, HeaderCreatedAt: created, hk: hv} {
			if v != "" {
				h.Set(k, v)
			}
		}
		d, err := deliveryFrom(h, data)
		if err != nil {
			var de *mensageria.DecodeError
			if !errors.As(err, &de) || !errors.Is(err, mensageria.ErrInvalidMessage) {
				t.Fatalf("error %v (%T) is not a DecodeError", err, err)
			}
			return
		}
		m := s.toMsg(d)
		again, err := deliveryFrom(m.Header, m.Data)
		if err != nil {
			t.Fatalf("re-encoded %+v: %v", d, err)
		}
		if again.ID != d.ID || again.Type != d.Type || again.Key != d.Key || string(again.Payload) != string(d.Payload) ||
			!again.CreatedAt.Equal(d.CreatedAt) || !maps.Equal(again.Headers, d.Headers) {
			t.Fatalf("round trip changed %+v into %+v", d, again)
		}
	})
}
