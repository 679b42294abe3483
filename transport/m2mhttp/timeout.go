package m2mhttp

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/xadm/mensageria"
)

// requestTimeout is the bound of one request of a Sender or a Probe: the
// configured one, or the default, which the relay's settings may shorten
// to its delivery window (UseRelaySettings).
type requestTimeout struct {
	field    string // the config field, for refusals
	explicit bool   // set by the config, not the default
	d        atomic.Int64
}

func newRequestTimeout(field string, d time.Duration, explicit bool) *requestTimeout {
	t := &requestTimeout{field: field, explicit: explicit}
	t.d.Store(int64(d))
	return t
}

func (t *requestTimeout) get() time.Duration { return time.Duration(t.d.Load()) }

// fit makes the timeout fit the relay's delivery window: a default one is
// shortened to it, an explicit one longer than it is refused.
func (t *requestTimeout) fit(rs mensageria.RelaySettings) error {
	w := rs.DeliveryWindow
	if w <= 0 {
		return nil // settings from something that is not the relay
	}
	if !t.explicit {
		t.d.Store(int64(min(DefaultTimeout, w)))
		return nil
	}
	if d := t.get(); d > w {
		return &mensageria.ConfigError{Field: t.field, Reason: fmt.Sprintf(
			"%s is longer than the relay's delivery window of %s (its lease of %s less the %s it keeps to settle): the relay would cut every request at %s; give at most %s, or a longer lease",
			d, w, rs.Lease, rs.Lease-w, w, w)}
	}
	return nil
}

// limit says, for an error, which deadline a request that gets no answer
// will have run into: its own timeout, or the relay's delivery deadline
// (ctx's) when that comes first.
func (t *requestTimeout) limit(ctx context.Context) string {
	d := t.get()
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < d {
			return fmt.Sprintf("before the relay's delivery deadline (the lease less its settle margin), %s after the request began (its own timeout is %s)", left.Round(time.Millisecond), d)
		}
	}
	return fmt.Sprintf("within %s", d)
}
