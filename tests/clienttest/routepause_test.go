package clienttest_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/mensageriatest"
)

func operatorPaused(c *mensageria.Client) []string {
	var out []string
	for _, r := range c.Routes() {
		for _, p := range r.OperatorPaused {
			out = append(out, p.Type)
		}
	}
	return out
}

// An operator's pause holds a type's messages pending, claimed by no relay
// of its app, while the app's other types flow: across a leader change, a
// restart of every relay, and with the relays ready all along; a resume
// delivers them at once, within the ownership watch (a third of a lease).
func TestOperatorPauseHoldsAcrossLeadersAndRestarts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		const typ, other = "pedido.criado", "pedido.enviado"
		app := uniqueApp("pedidos")
		sink, sinkOther := &recorder{}, &recorder{}
		newRelay := func() (*mensageria.Client, *logBuffer) {
			logs, lines := capture()
			cfg := fastConfig(app, mensageria.NewRegistry().MustRegister(typ, sink).MustRegister(other, sinkOther))
			cfg.Logger = logs
			c := newClient(t, b.open(), cfg)
			start(t, c)
			return c, lines
		}
		first, firstLog := newRelay()
		pauser, ok := b.open().(driver.RoutePauser)
		if !ok {
			t.Fatalf("%s records no operator pauses", b.name)
		}
		if _, err := pauser.PauseRoute(context.Background(), driver.PauseRouteParams{App: app, Type: typ, PausedBy: "cli:ana", Reason: "the billing receiver upgrades"}); err != nil {
			t.Fatal(err)
		}
		mensageriatest.Eventually(t, 10*time.Second, func() bool { return slices.Contains(operatorPaused(first), typ) }, "the running relay reads the pause")
		if log := firstLog.String(); !strings.Contains(log, "an operator paused a type") || !strings.Contains(log, "paused_by=cli:ana") {
			t.Fatalf("the relay's log does not say who paused what:\n%s", log)
		}

		// held checks that every message of typ is still pending and never
		// attempted, once the other type's later messages were delivered:
		// the claim takes both types oldest first, so a claim of typ would
		// have come with them.
		held := func(phase string, c *mensageria.Client, otherKeys []string) {
			t.Helper()
			mensageriatest.Eventually(t, 20*time.Second, func() bool {
				got := sinkOther.keys()
				for _, k := range otherKeys {
					if got[k] != 1 {
						return false
					}
				}
				return true
			}, phase+": the other type flows")
			if n := len(sink.keys()); n != 0 {
				t.Fatalf("%s: %d messages of the paused type were delivered", phase, n)
			}
			if n := b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE type = '" + typ + "' AND (state <> 'pending' OR attempts <> 0)"); n != 0 {
				t.Fatalf("%s: %d rows of the paused type were claimed", phase, n)
			}
			if err := c.Ready(); err != nil {
				t.Fatalf("%s: an intended pause made the relay unready: %v", phase, err)
			}
		}
		paused := enqueueKeys(t, first, typ, "paused", 10)
		held("one relay", first, enqueueKeys(t, first, other, "one", 5))

		// A second relay of the app, then the leader stops: the standby
		// leads, and had read the pause before its first claim.
		second, _ := newRelay()
		if !slices.Contains(operatorPaused(second), typ) {
			t.Fatalf("a relay that just started does not know of the pause: %v", operatorPaused(second))
		}
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := first.Stop(stopCtx); err != nil {
			t.Fatal(err)
		}
		mensageriatest.Eventually(t, 20*time.Second, second.IsLeader, "the standby leads")
		held("after a leader change", second, enqueueKeys(t, second, other, "leader", 5))

		// Every relay restarted.
		if err := second.Stop(stopCtx); err != nil {
			t.Fatal(err)
		}
		third, _ := newRelay()
		held("after a restart", third, enqueueKeys(t, third, other, "restart", 5))

		resumedAt := time.Now()
		if _, found, err := pauser.ResumeRoute(context.Background(), typ); err != nil || !found {
			t.Fatalf("ResumeRoute: found %v, %v", found, err)
		}
		mensageriatest.Eventually(t, 20*time.Second, func() bool {
			got := sink.keys()
			for _, k := range paused {
				if got[k] != 1 {
					return false
				}
			}
			return true
		}, "the resumed type is delivered")
		if took, bound := time.Since(resumedAt), time.Second+2*time.Second; took > bound {
			t.Errorf("delivered %s after the resume, more than the watch's third of a lease plus a margin (%s)", took, bound)
		}
		if got := operatorPaused(third); len(got) != 0 {
			t.Fatalf("routes still report pauses %v after the resume", got)
		}
	})
}
