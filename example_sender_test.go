package mensageria_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/xadm/mensageria"
)

// A Sender tells the relay what a failure means by wrapping its error:
// Permanent parks the message dead at once, Unavailable counts against
// the route rather than the message (an outage never turns a backlog
// into dead letters), RetryAfter carries the destination's requested
// delay, and NotSent proves the request never left, which an AtMostOnce
// route may retry. A plain error is retried with backoff.
func ExampleSenderFunc() {
	send := mensageria.SenderFunc(func(ctx context.Context, d *mensageria.Delivery) error {
		switch d.Key { // a real Sender looks at the destination's answer
		case "422":
			return mensageria.Permanent(errors.New("422: the receiver refuses this payload"))
		case "503":
			return mensageria.RetryAfter(mensageria.Unavailable(errors.New("503: billing is down")), 30*time.Second)
		case "refused":
			return mensageria.NotSent(mensageria.Unavailable(errors.New("dial tcp: connection refused")))
		case "timeout":
			return errors.New("no answer within the timeout")
		}
		return nil
	})
	for _, key := range []string{"200", "422", "503", "refused", "timeout"} {
		err := send.Send(context.Background(), &mensageria.Delivery{Type: "pedido.criado", Key: key})
		after, _ := mensageria.RetryAfterOf(err)
		fmt.Printf("%-8s permanent=%-5v unavailable=%-5v not-sent=%-5v retry-after=%v\n", key,
			mensageria.IsPermanent(err), mensageria.IsUnavailable(err), mensageria.IsNotSent(err), after)
	}
	// Output:
	// 200      permanent=false unavailable=false not-sent=false retry-after=0s
	// 422      permanent=true  unavailable=false not-sent=false retry-after=0s
	// 503      permanent=false unavailable=true  not-sent=false retry-after=30s
	// refused  permanent=false unavailable=true  not-sent=true  retry-after=0s
	// timeout  permanent=false unavailable=false not-sent=false retry-after=0s
}
