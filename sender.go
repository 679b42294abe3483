package mensageria

import (
	"context"

	"github.com/xadm/mensageria/driver"
)

// Sender delivers messages of one type to their destination. Send returns
// nil only when the destination has the message. An error is retried later
// with backoff unless it is wrapped with Permanent.
//
// A Sender must be safe for concurrent use.
type Sender interface {
	Send(ctx context.Context, d *Delivery) error
}

// BatchSender is implemented by Senders that can deliver many messages in
// one exchange. SendBatch returns one error per delivery, in order; a nil
// slice means all were delivered.
type BatchSender interface {
	Sender
	SendBatch(ctx context.Context, ds []*Delivery) []error
}

// SenderFunc adapts a function to Sender.
type SenderFunc func(ctx context.Context, d *Delivery) error

// Send calls f.
func (f SenderFunc) Send(ctx context.Context, d *Delivery) error { return f(ctx, d) }

// ResourceOwner is implemented by Senders that hold something two apps
// must never share, such as a Kafka transactional id. Client.Start records
// those resources in the ownership catalog together with the app's types,
// so a second app configured with the same one fails at start.
type ResourceOwner interface {
	OwnedResources() []driver.Resource
}

// DestinationNamer is implemented by Senders that can say where they
// deliver ("http https://billing/m2m", "kafka topic pedidos"). The relay
// stores it, with the app, beside a retried or dead message's error, so a
// dead letter says which route answered.
type DestinationNamer interface {
	Destination() string
}
