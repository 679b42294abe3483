package kafka

import (
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/m2mwire"
)

// DeliveryOf rebuilds the delivery a Sender produced, so that a consumer
// (a Sink's Effect, or any Kafka consumer) can apply it through a
// mensageria.Inbox. The record is outside input: a record that no Sender
// produced, or one damaged on the way, gets a *mensageria.DecodeError.
//
// Attempt is left 0 (Kafka does not count deliveries) and Seq is the
// record's offset, which orders records within a partition only.
func DeliveryOf(r *kgo.Record) (*mensageria.Delivery, error) {
	d := &mensageria.Delivery{Key: string(r.Key), Payload: r.Value, Seq: r.Offset}
	var haveID, haveType bool
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderMessageID:
			if haveID {
				continue // the Sender's own comes first
			}
			id, err := uuid.ParseBytes(h.Value)
			if err != nil {
				return nil, decodeErr(HeaderMessageID, err.Error())
			}
			d.ID, haveID = id, true
		case HeaderType:
			if !haveType {
				d.Type, haveType = string(h.Value), true
			}
		case HeaderCreatedAt:
			if !d.CreatedAt.IsZero() {
				continue
			}
			t, err := m2mwire.ParseTime(string(h.Value))
			if err != nil {
				return nil, decodeErr(HeaderCreatedAt, err.Error())
			}
			d.CreatedAt = t
		default:
			if d.Headers == nil {
				d.Headers = map[string]string{}
			}
			d.Headers[h.Key] = string(h.Value)
		}
	}
	switch {
	case !haveID:
		return nil, decodeErr(HeaderMessageID, "missing: not produced by a mensageria Sender")
	case d.Type == "":
		return nil, decodeErr(HeaderType, "missing or empty")
	}
	return d, nil
}

func decodeErr(field, reason string) error {
	return &mensageria.DecodeError{Transport: "kafka", Field: field, Reason: reason}
}
