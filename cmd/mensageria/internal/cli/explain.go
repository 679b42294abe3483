package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/cmd/mensageria/internal/guarantee"
	"github.com/xadm/mensageria/cmd/mensageria/internal/relay"
	"github.com/xadm/mensageria/redact"
	"github.com/xadm/mensageria/transport/m2mhttp"
)

type explainRoute struct {
	Type        string `json:"type"`
	Destination string `json:"destination"`
	Line        int    `json:"line"`
	// Security names the route's TLS and credentials by their files and
	// user names, never their contents.
	Security string `json:"security,omitempty"`
	// Delivery is how messages travel: "batch" (several per request) or
	// "single".
	Delivery string `json:"delivery,omitempty"`
	// MaxRate is the route's limit in messages per second (0: none).
	MaxRate float64 `json:"max_rate,omitempty"`
	// Deadline is what bounds one delivery of the route.
	Deadline explainDeadline `json:"deadline"`
	Map      guarantee.Map   `json:"guarantees"`
}

// explainDeadline is what bounds one delivery of a route: its request
// timeout as the relay applies it (http), its probe's, and the delivery
// window of the lease, by which every delivery of a claim ends.
type explainDeadline struct {
	// RequestTimeoutSec is an http route's timeout as applied: the
	// config's, or the default shortened to the window (0: not http).
	RequestTimeoutSec float64 `json:"request_timeout_seconds,omitempty"`
	// RequestTimeoutDefault: the config gives none.
	RequestTimeoutDefault bool `json:"request_timeout_default,omitempty"`
	// ProbeTimeoutSec is the reconcile probe's timeout as applied (0: no
	// probe).
	ProbeTimeoutSec float64 `json:"probe_timeout_seconds,omitempty"`
	// DeliveryWindowSec: the lease less the settle margin.
	DeliveryWindowSec float64 `json:"delivery_window_seconds"`
	Text              string  `json:"text"`
}

// explainTiming is the relay's effective timing: the config's figures,
// the library's defaults where it gives none.
type explainTiming struct {
	LeaseSec       float64 `json:"lease_seconds"`
	MaxAttempts    int     `json:"max_attempts"`
	BackoffBaseSec float64 `json:"backoff_base_seconds"`
	BackoffMaxSec  float64 `json:"backoff_max_seconds"`
	// RetryHorizonSec is the longest a message keeps being retried: every
	// backoff up to the last attempt plus a lease per attempt.
	RetryHorizonSec float64 `json:"retry_horizon_seconds"`
	// DeliveredRetentionSec: delivered rows are kept this long (0: deleted
	// when settled).
	DeliveredRetentionSec float64 `json:"delivered_retention_seconds"`
	PurgeIntervalSec      float64 `json:"purge_interval_seconds"`
	// DeliveryWindowSec is how long a claim's deliveries may run: the
	// lease less SettleMarginSec, which the relay keeps to record them.
	DeliveryWindowSec float64 `json:"delivery_window_seconds"`
	SettleMarginSec   float64 `json:"settle_margin_seconds"`
	// DefaultInboxWindowSec is an Inbox's dedup window when its own
	// config gives none; each consumer's window is in the catalog.
	DefaultInboxWindowSec float64 `json:"default_inbox_window_seconds"`
	// The routes' flow control: failures of a destination in a row that
	// pause its route, the first and the longest pause before a probe, and
	// the longest Retry-After honoured.
	RouteFailureThreshold int     `json:"route_failure_threshold"`
	RoutePauseSec         float64 `json:"route_pause_seconds"`
	RoutePauseMaxSec      float64 `json:"route_pause_max_seconds"`
	RetryAfterCeilingSec  float64 `json:"retry_after_ceiling_seconds"`
}

// explainOwnership is the catalog as explain read it, when it could.
type explainOwnership struct {
	// Read is false when the database was not reachable (Why says why);
	// the rest is then empty.
	Read    bool         `json:"read"`
	Why     string       `json:"why,omitempty"`
	Entries []OwnerEntry `json:"entries,omitempty"`
}

type explainOut struct {
	App       string           `json:"app"`
	Election  string           `json:"election"`
	Timing    explainTiming    `json:"timing"`
	Ownership explainOwnership `json:"ownership"`
	Routes    []explainRoute   `json:"routes"`
}

func timingOf(c *config.Config) explainTiming {
	cl := c.OfflineClient()
	e := cl.Config()
	return explainTiming{
		LeaseSec: e.Lease.Seconds(), MaxAttempts: e.MaxAttempts,
		DeliveryWindowSec: mensageria.DeliveryWindow(e.Lease).Seconds(), SettleMarginSec: mensageria.SettleMargin(e.Lease).Seconds(),
		BackoffBaseSec: e.BackoffBase.Seconds(), BackoffMaxSec: e.BackoffMax.Seconds(),
		RetryHorizonSec:       cl.RetryHorizon().Seconds(),
		DeliveredRetentionSec: e.DeliveredRetention.Seconds(), PurgeIntervalSec: e.PurgeInterval.Seconds(),
		DefaultInboxWindowSec: mensageria.DefaultInboxWindow.Seconds(),
		RouteFailureThreshold: e.RouteFailureThreshold, RoutePauseSec: e.RoutePause.Seconds(),
		RoutePauseMaxSec: e.RoutePauseMax.Seconds(), RetryAfterCeilingSec: e.RetryAfterCeiling.Seconds(),
	}
}

// readOwnership reads the catalog entries that concern the config's app:
// its routed types (whoever owns them) and whatever else it owns. It never
// creates anything: a SQLite file that does not exist is not opened.
func readOwnership(ctx context.Context, c *config.Config) explainOwnership {
	if c.Backend() == "sqlite" {
		if _, err := os.Stat(c.SQLitePath()); err != nil {
			return explainOwnership{Why: "no database file at " + c.SQLitePath()}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	b, err := daemon.OpenPinged(ctx, c.Database, c.Schema, true)
	if err != nil {
		return explainOwnership{Why: err.Error()}
	}
	defer b.Close()
	if err := checkSchema(ctx, c, b); err != nil {
		return explainOwnership{Why: err.Error()}
	}
	all, err := b.Driver.Owners(ctx, "")
	if err != nil {
		return explainOwnership{Why: err.Error()}
	}
	out := explainOwnership{Read: true, Entries: []OwnerEntry{}}
	for _, o := range all {
		_, routed := c.Route(o.Name)
		if o.App == c.App || (o.Kind == mensageria.ResourceType && routed) || o.Kind == mensageria.ResourceMigrations {
			out.Entries = append(out.Entries, ownerEntryOf(o))
		}
	}
	return out
}

func (a *app) explainCommand() *cobra.Command {
	var asJSON, noDB bool
	cmd := &cobra.Command{
		Use:   "explain",
		Short: "Show what each route of the config guarantees, and where idempotency must defend",
		Long: `explain prints the guarantee map of the config: for every route its
transport, the level that holds on each hop (exactly-once into the outbox,
at-least-once to the destination, effectively-once through an inbox,
exactly-once inside Kafka) and the places where a duplicate can still
reach a side effect; the relay's real timing (lease, attempts, backoff, the
retry horizon a receiver's dedup window must outlast, the purge windows);
and, when the database answers, who owns the config's types and what else
the ownership catalog gives its app (--no-db: the config only). It never
writes anything.`,
		Args: noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			c, err := a.loadConfig()
			if err != nil {
				return err
			}
			out := explainOut{App: c.App, Election: relay.ElectionName(c.Relay.Election), Timing: timingOf(c)}
			if noDB {
				out.Ownership.Why = "not read (--no-db)"
			} else {
				out.Ownership = readOwnership(cmd.Context(), c)
			}
			for _, r := range c.Routes {
				m, ok := guarantee.For(r.Transport, guarantee.Options{Ordered: r.Ordered, NoElection: c.Relay.Election == mensageria.ElectionNone,
					KafkaTransactional: r.Kafka != nil && r.Kafka.TransactionalID != "",
					AtMostOnce:         r.Delivery == mensageria.AtMostOnce, Reconcile: r.HTTP != nil && r.HTTP.Reconcile != nil})
				if !ok {
					return fmt.Errorf("route %q: no guarantee map for transport %q", r.Type, r.Transport)
				}
				out.Routes = append(out.Routes, explainRoute{Type: r.Type, Destination: r.Destination(), Line: r.Line,
					Security: r.Security(), Delivery: delivery(r), MaxRate: r.MaxRate, Deadline: deadlineOf(c, r), Map: m})
			}
			if asJSON {
				enc := json.NewEncoder(a.io.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			writeExplain(a.io.Out, c, out)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&noDB, "no-db", false, "do not read the ownership catalog (the config only)")
	return cmd
}

// deadlineOf says what bounds one delivery of r: the relay cuts every
// delivery of a claim at the lease's delivery window, and an http request
// (or probe) at its own timeout before that.
func deadlineOf(c *config.Config, r config.Route) explainDeadline {
	lease := c.Effective().Lease
	w := mensageria.DeliveryWindow(lease)
	d := explainDeadline{DeliveryWindowSec: w.Seconds()}
	window := fmt.Sprintf("a claim's deliveries end %s after it (the lease of %s less the %s kept to settle them); one still running then is cut and retried",
		humanDuration(w), humanDuration(lease), humanDuration(lease-w))
	if r.Delivery == mensageria.AtMostOnce {
		window = fmt.Sprintf("a claim's deliveries end %s after it (the lease of %s less the %s kept to settle them); one cut then is in doubt, never sent again",
			humanDuration(w), humanDuration(lease), humanDuration(lease-w))
	}
	if r.HTTP == nil {
		d.Text = window
		return d
	}
	timeout := c.RequestTimeout(r.HTTP)
	d.RequestTimeoutSec = timeout.Seconds()
	d.RequestTimeoutDefault = r.HTTP.Timeout == 0
	how := "http.timeout"
	switch {
	case r.HTTP.Timeout == 0 && timeout < m2mhttp.DefaultTimeout:
		how = fmt.Sprintf("the default %s, shortened to the delivery window", humanDuration(m2mhttp.DefaultTimeout))
	case r.HTTP.Timeout == 0:
		how = "the default"
	}
	d.Text = fmt.Sprintf("each request %s (%s); %s", humanDuration(timeout), how, window)
	if p := r.HTTP.Reconcile; p != nil {
		pt := p.Timeout
		if pt == 0 {
			pt = min(m2mhttp.DefaultTimeout, w)
		}
		d.ProbeTimeoutSec = pt.Seconds()
		d.Text += fmt.Sprintf("; each reconcile probe %s", humanDuration(pt))
	}
	return d
}

// m2mhttp.SenderConfig's defaults of MaxBatchItems and MaxBatchBytes,
// shown by explain.
const (
	defaultBatchItems = 100
	defaultBatchBytes = 1 << 20
)

// delivery says how a route's messages travel.
func delivery(r config.Route) string {
	if r.HTTP == nil {
		return ""
	}
	if r.Delivery == mensageria.AtMostOnce {
		s := "at most once, for a receiver that is not idempotent: the relay commits a mark before each request, and a request that may have reached the receiver without a definite answer (a timeout, a connection cut after it was written, a 5xx, the relay dying) leaves its message in doubt, never sent again automatically ('mensageria doubt'); only a refused connection, a name that does not resolve"
		if len(r.HTTP.NotApplied) > 0 {
			s += fmt.Sprintf(" or a status declared not applied (%v)", r.HTTP.NotApplied)
		}
		s += " is retried"
		if p := r.HTTP.Reconcile; p != nil {
			applied, not := p.Applied, p.NotApplied
			if len(applied) == 0 {
				applied = []int{200}
			}
			if len(not) == 0 {
				not = []int{404}
			}
			s += fmt.Sprintf("; messages in doubt are probed with GET %s (applied %v: delivered; not applied %v: one more attempt; anything else: still in doubt)", redact.URL(p.URL), applied, not)
		} else {
			s += "; no reconcile probe: an operator resolves messages in doubt"
		}
		return s
	}
	if !r.HTTP.Batch {
		return "single: one request per message"
	}
	items, size := r.HTTP.MaxBatchItems, r.HTTP.MaxBatchBytes
	if items == 0 {
		items = defaultBatchItems
	}
	if size == 0 {
		size = defaultBatchBytes
	}
	return fmt.Sprintf("batch: a claim's messages in requests of at most %d messages and %d bytes, each applied in one receiver transaction", items, size)
}

func writeExplain(w io.Writer, c *config.Config, out explainOut) {
	head := fmt.Sprintf("app %s: %d route(s); election %s", out.App, len(out.Routes), out.Election)
	if out.Election == "leader" {
		head += " (one active relay per app; a deposed leader is fenced out)."
	} else {
		head += " (every replica relays; claims stay disjoint through row locks and leases)."
	}
	fmt.Fprint(w, wrap("", "", head))
	fmt.Fprint(w, wrap("", "", "Nothing is dropped silently: a message is delivered, or parked as dead with its reason (a permanent refusal, or max attempts) for 'mensageria dead' to show, retry or discard."))
	writeTiming(w, out.Timing)
	writeOwnership(w, c, out.Ownership)
	for _, r := range out.Routes {
		m := r.Map
		fmt.Fprintf(w, "\nroute %s  (line %d)\n", r.Type, r.Line)
		fmt.Fprintf(w, "  transport   %s  %s\n", m.Transport, r.Destination)
		if r.Security != "" {
			fmt.Fprint(w, wrap("  security    ", "              ", r.Security))
		}
		if r.Delivery != "" {
			fmt.Fprint(w, wrap("  delivery    ", "              ", r.Delivery))
		}
		fmt.Fprint(w, wrap("  deadline    ", "              ", r.Deadline.Text))
		if r.MaxRate > 0 {
			fmt.Fprint(w, wrap("  rate        ", "              ", fmt.Sprintf("at most %s messages a second (waiting for the rate never costs an attempt)", strconv.FormatFloat(r.MaxRate, 'f', -1, 64))))
		}
		fmt.Fprintf(w, "  end to end  %s\n", strings.ToUpper(string(m.EndToEnd)))
		fmt.Fprint(w, wrap("  boundary    ", "              ", m.Boundary))
		if m.Ordering != "" {
			fmt.Fprint(w, wrap("  ordering    ", "              ", m.Ordering))
		}
		fmt.Fprintln(w, "  hops")
		for _, h := range m.Hops {
			fmt.Fprintf(w, "    %-21s -> %-21s %s\n", h.From, h.To, h.Level)
			fmt.Fprint(w, wrap("      ", "      ", h.Why))
			if h.Requires != "" {
				fmt.Fprint(w, wrap("      requires: ", "        ", h.Requires))
			}
		}
		fmt.Fprintln(w, "  idempotency must defend")
		for _, d := range m.Defend {
			fmt.Fprint(w, wrap("    - ", "      ", d))
		}
	}
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func writeTiming(w io.Writer, t explainTiming) {
	fmt.Fprintln(w, "\nrelay timing (the config's figures; the library's defaults where it gives none)")
	row := func(name, value, text string) {
		fmt.Fprint(w, wrap(fmt.Sprintf("  %-14s %-10s ", name, value), strings.Repeat(" ", 28), text))
	}
	row("lease", humanDuration(secs(t.LeaseSec)), "a claimed batch is held this long; a crashed relay's batch is delivered again after it; a running relay follows a change of the ownership catalog within it")
	row("deadline", humanDuration(secs(t.DeliveryWindowSec)), fmt.Sprintf("a claim's deliveries end this long after it: the lease less the %s kept to record them; a delivery still running then is cut", humanDuration(secs(t.SettleMarginSec))))
	row("attempts", fmt.Sprint(t.MaxAttempts), "then the message is parked as dead, with its reason")
	row("backoff", humanDuration(secs(t.BackoffBaseSec)), fmt.Sprintf("after the first failure, doubling up to %s (jitter only shortens it)", humanDuration(secs(t.BackoffMaxSec))))
	row("retry horizon", humanDuration(secs(t.RetryHorizonSec).Round(time.Second)),
		"the longest the relay's own backoff keeps a message retried (a destination's Retry-After and its outages add to it): a receiver's dedup window (an inbox's, a broker's) must be longer, or a late retry gets through as new")
	row("route pause", fmt.Sprintf("after %d", t.RouteFailureThreshold),
		fmt.Sprintf("destination failures in a row (refused connections, timeouts, 5xx, 429, 401) pause that route alone, without counting attempts: one probe after %s, doubling to %s while it fails", humanDuration(secs(t.RoutePauseSec)), humanDuration(secs(t.RoutePauseMaxSec))))
	row("retry-after", "up to "+humanDuration(secs(t.RetryAfterCeilingSec)), "a destination's Retry-After is waited out in full up to this, even above the backoff's cap")
	delivered := "delivered rows are deleted when settled"
	if t.DeliveredRetentionSec > 0 {
		delivered = "delivered rows are kept " + humanDuration(secs(t.DeliveredRetentionSec))
	}
	row("purge", "every "+humanDuration(secs(t.PurgeIntervalSec)),
		fmt.Sprintf("%s; the inbox records of this app's consumers go after each consumer's own window in the catalog (an Inbox's default %s), other apps' never", delivered, humanDuration(secs(t.DefaultInboxWindowSec))))
}

func writeOwnership(w io.Writer, c *config.Config, o explainOwnership) {
	fmt.Fprintf(w, "\nownership (schema %s)\n", c.Schema)
	if !o.Read {
		fmt.Fprint(w, wrap("  ", "  ", "not read: "+o.Why+". The relay records the config's types as app "+c.App+"'s when it starts, and refuses to start if another app owns one."))
		return
	}
	owner := map[string]OwnerEntry{}
	for _, e := range o.Entries {
		if e.Kind == string(mensageria.ResourceType) {
			owner[e.Name] = e
		}
	}
	for _, t := range c.Types() {
		e, ok := owner[t]
		switch {
		case !ok:
			fmt.Fprintf(w, "  type %-30s no owner yet: app %s's relay records it when it starts\n", t, c.App)
		case e.Unclaimed:
			fmt.Fprintf(w, "  type %-30s unclaimed (left by the upgrade): app %s's relay takes it when it starts\n", t, c.App)
		case e.App == c.App:
			fmt.Fprintf(w, "  type %-30s app %s\n", t, e.App)
		default:
			fmt.Fprint(w, wrap(fmt.Sprintf("  type %-30s ", t), strings.Repeat(" ", 38),
				fmt.Sprintf("app %s: OWNED BY ANOTHER APP, so app %s's relay refuses to start (move it with 'mensageria owners transfer', or remove the route)", e.App, c.App)))
		}
	}
	for _, e := range o.Entries {
		_, routed := c.Route(e.Name)
		switch {
		case e.Kind == string(mensageria.ResourceType) && routed:
		case e.Kind == string(mensageria.ResourceType):
			fmt.Fprintf(w, "  type %-30s app %s, not routed by this config: its rows stay pending\n", e.Name, e.App)
		case e.Kind == string(mensageria.ResourceConsumer):
			window := "records kept forever"
			if e.WindowSeconds != nil && *e.WindowSeconds > 0 {
				window = "window " + humanDuration(secs(*e.WindowSeconds))
			}
			fmt.Fprintf(w, "  consumer %-26s app %s, %s\n", e.Name, e.App, window)
		case e.Kind == string(mensageria.ResourceMigrations):
			fmt.Fprintf(w, "  migrations %-24s app %s runs 'migrate up'\n", "", appName(e.App))
		default:
			fmt.Fprintf(w, "  %s %s  app %s\n", e.Kind, e.Name, appName(e.App))
		}
	}
}

// wrap fills text to 78 columns, the first line after first and the
// others after indent.
func wrap(first, indent, text string) string {
	var b strings.Builder
	line := first
	empty := true
	for _, word := range strings.Fields(text) {
		if !empty && len(line)+1+len(word) > 78 {
			b.WriteString(line + "\n")
			line, empty = indent, true
		}
		if !empty {
			line += " "
		}
		line += word
		empty = false
	}
	b.WriteString(line + "\n")
	return b.String()
}
