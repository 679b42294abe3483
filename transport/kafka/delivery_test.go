package kafka

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadm/mensageria"
)

func TestDeliveryOfRefusesForeignRecords(t *testing.T) {
	id := uuid.Must(uuid.NewV7()).String()
	for name, hs := range map[string][]kgo.RecordHeader{
		"no headers":       nil,
		"no id":            {{Key: HeaderType, Value: []byte("order")}},
		"id not a uuid":    {{Key: HeaderMessageID, Value: []byte("42")}, {Key: HeaderType, Value: []byte("order")}},
		"no type":          {{Key: HeaderMessageID, Value: []byte(id)}},
		"empty type":       {{Key: HeaderMessageID, Value: []byte(id)}, {Key: HeaderType}},
		"created-at wrong": {{Key: HeaderMessageID, Value: []byte(id)}, {Key: HeaderType, Value: []byte("order")}, {Key: HeaderCreatedAt, Value: []byte("yesterday")}},
	} {
		_, err := DeliveryOf(&kgo.Record{Key: []byte("k"), Value: []byte(`{}`), Headers: hs})
		var de *mensageria.DecodeError
		if !errors.Is(err, mensageria.ErrInvalidMessage) || !errors.As(err, &de) || de.Transport != "kafka" || de.Field == "" {
			t.Errorf("%s: %v, want a *mensageria.DecodeError naming its field", name, err)
		}
	}
	// A later header with a reserved name does not override the Sender's.
	d, err := DeliveryOf(&kgo.Record{Headers: []kgo.RecordHeader{
		{Key: HeaderMessageID, Value: []byte(id)}, {Key: HeaderType, Value: []byte("order")},
		{Key: HeaderType, Value: []byte("forged")}, {Key: HeaderMessageID, Value: []byte("not-a-uuid")},
	}})
	if err != nil || d.Type != "order" || d.ID.String() != id {
		t.Fatalf("DeliveryOf = %+v, %v", d, err)
	}
}

// Records come from the network: whatever their headers, DeliveryOf
// returns a delivery or a DecodeError, and a delivery it returns survives
// the Sender's encoding unchanged.
func FuzzDeliveryOf(f *testing.F) {
	f.Add("0192f7a0-7b3c-7def-8123-456789abcdef", "order.created", "2026-11-30T12:00:00.123456789Z", "k-1", []byte(`{"n":1}`), "traceparent", "00-abc-def-01")
	f.Add("", "", "", "", []byte(nil), "", "")
	f.Add("0192f7a0-7b3c-7def-8123-456789abcdef", "t", "2026-13-40T99:00:00Z", "", []byte("x"), HeaderType, "again")
	f.Fuzz(func(t *testing.T, id, typ, created, key string, value []byte, hk, hv string) {
		r := &kgo.Record{Key: []byte(key), Value: value, Offset: 7, Headers: []kgo.RecordHeader{
			{Key: HeaderMessageID, Value: []byte(id)}, {Key: HeaderType, Value: []byte(typ)},
			{Key: HeaderCreatedAt, Value: []byte(created)}, {Key: hk, Value: []byte(hv)},
		}}
		d, err := DeliveryOf(r)
		if err != nil {
			var de *mensageria.DecodeError
			if !errors.As(err, &de) || !errors.Is(err, mensageria.ErrInvalidMessage) {
				t.Fatalf("error %v (%T) is not a DecodeError", err, err)
			}
			return
		}
		again, err := DeliveryOf(toRecord("t", d))
		if err != nil {
			t.Fatalf("re-encoded %+v: %v", d, err)
		}
		again.Seq = d.Seq
		if again.ID != d.ID || again.Type != d.Type || again.Key != d.Key || string(again.Payload) != string(d.Payload) ||
			!again.CreatedAt.Equal(d.CreatedAt) || !maps.Equal(again.Headers, d.Headers) {
			t.Fatalf("round trip changed %+v into %+v", d, again)
		}
		if !d.CreatedAt.IsZero() && d.CreatedAt.Location() != time.UTC && again.CreatedAt.Location() != time.UTC {
			t.Fatalf("created-at not normalised to UTC: %v", again.CreatedAt)
		}
	})
}
