package m2mhttp

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
)

// QueueHandler is the Handler of a type whose deliveries an app applies by
// SQL, in its own transactions, from the inbox queue (what `mensageria
// receive` serves; docs/config.md, the inbox queue SQL protocol). Its
// effect stores the delivery as a pending row of in's consumer in the
// transaction that stores the dedup record, so the Receiver's answers keep
// their meaning: applied is "stored for the app, once", duplicate and
// conflict store nothing, and a failed store rolls both back and asks the
// sender to retry.
//
// in must run on a backend whose transactions hold the queue
// (driver.InboxQueueTx: the PostgreSQL and SQLite drivers, at schema
// version 4 and 5 respectively); on any other, every delivery fails with a
// retryable error naming the backend.
func QueueHandler(in *mensageria.Inbox) (Handler, error) {
	if in == nil {
		return Handler{}, &mensageria.ConfigError{Field: "Handlers", Reason: "QueueHandler needs an Inbox"}
	}
	consumer := in.Consumer()
	return Handler{Inbox: in, Effect: func(ctx context.Context, tx mensageria.Tx, d *mensageria.Delivery) error {
		q, ok := tx.(driver.InboxQueueTx)
		if !ok {
			return fmt.Errorf("m2mhttp: the inbox queue needs a backend that has one; %T has none", tx)
		}
		var headers []byte
		if len(d.Headers) > 0 {
			var err error
			if headers, err = json.Marshal(d.Headers); err != nil {
				return err
			}
		}
		_, err := q.QueueInbox(ctx, driver.QueuedDelivery{
			Consumer: consumer, Type: d.Type, Key: d.Key, MessageID: d.ID,
			Payload: d.Payload, Headers: headers, CreatedAt: d.CreatedAt,
		})
		return err
	}}, nil
}
