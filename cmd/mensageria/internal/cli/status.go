package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/cmd/mensageria/internal/relay"
	"github.com/xadm/mensageria/ops"
)

// StatusType is one type's line of `status --json`.
type StatusType struct {
	Type    string `json:"type"`
	Routed  bool   `json:"routed"` // by this config's app
	Owner   string `json:"owner"`  // the owning app in the catalog; "" for none
	Pending int64  `json:"pending"`
	// Scheduled counts messages not due yet (a NotBefore in the future)
	// and never attempted; Pending and OldestPendingSec leave them out.
	Scheduled        int64   `json:"scheduled"`
	InFlight         int64   `json:"in_flight"`
	Dead             int64   `json:"dead"`
	DeliveredLastHr  int64   `json:"delivered_last_hour"`
	OldestPendingSec float64 `json:"oldest_pending_seconds"`
	// InDoubt counts the messages of an at_most_once route in doubt;
	// OldestInDoubtSec is the age of the oldest one's attempt.
	InDoubt          int64   `json:"in_doubt"`
	OldestInDoubtSec float64 `json:"oldest_in_doubt_seconds"`
	// Route is the flow control of the type's route as its active relay
	// last recorded it; absent before any relay of the owner ran.
	Route *StatusRoute `json:"route,omitempty"`
	// Paused is an operator's pause of the type ('mensageria routes
	// pause'), with who and why; absent when it is not paused.
	Paused *pausedJSON `json:"paused,omitempty"`
}

// StatusRoute is a route's state in `status --json`.
type StatusRoute struct {
	Name      string     `json:"name"`
	State     string     `json:"state"` // flowing, paused or probing
	Since     time.Time  `json:"since"`
	Until     *time.Time `json:"until,omitempty"` // paused: when the probe is due
	Failures  int        `json:"failures"`
	LastError string     `json:"last_error,omitempty"`
	Recorded  time.Time  `json:"recorded"`
}

// StatusElection is the election part of `status --json`.
type StatusElection struct {
	Mode   string     `json:"mode"`
	Holder string     `json:"holder"`
	Epoch  int64      `json:"epoch"`
	Since  *time.Time `json:"since,omitempty"`
	// The holder's parts, when it has a relay's name (host/pid/id):
	// RelayID is the relay's own id, Host and PID its process.
	RelayID string `json:"relay_id,omitempty"`
	Host    string `json:"host,omitempty"`
	PID     int    `json:"pid,omitempty"`
	// NotARelay: the holder has no relay's name (the row was written by
	// hand, by something that is not a relay).
	NotARelay bool `json:"not_a_relay,omitempty"`
	// Expires is when the holder's lease runs out.
	Expires *time.Time `json:"expires,omitempty"`
	// Lapsed names the last holder when its lease ran out without being
	// given up: that relay crashed, or runs and cannot renew.
	Lapsed string `json:"lapsed,omitempty"`
	// Health is what the holder said of its own readiness at its last
	// renewal: empty while it was ready.
	Health string `json:"health,omitempty"`
	// Outsider describes a session that is not a relay holding what
	// earlier versions elected with; it no longer stops any relay.
	Outsider string `json:"outsider,omitempty"`
}

// relayName splits a relay's election name, host/pid/id.
func relayName(holder string) (host string, pid int, id string, ok bool) {
	i, j := strings.Index(holder, "/"), strings.LastIndex(holder, "/")
	if i <= 0 || j <= i+1 || j == len(holder)-1 {
		return "", 0, "", false
	}
	pid, err := strconv.Atoi(holder[i+1 : j])
	if err != nil || pid <= 0 {
		return "", 0, "", false
	}
	return holder[:i], pid, holder[j+1:], true
}

// Status is the output of `status --json`.
type Status struct {
	App      string         `json:"app"`
	Schema   string         `json:"schema"`
	At       time.Time      `json:"at"`
	Election StatusElection `json:"election"`
	Types    []StatusType   `json:"types"`
}

func collectStatus(ctx context.Context, c *config.Config, o *ops.Ops) (*Status, error) {
	counts, err := o.Count(ctx) // the outbox's only: status shows no inbox queue
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	p := ops.StatusParams{Counted: &ops.Counted{Types: counts}, Types: c.Types()}
	// A receive daemon's config relays nothing here; election none
	// elects nobody.
	if c.Receive == nil && c.Relay.Election != mensageria.ElectionNone {
		p.Elections = []string{c.App}
	}
	full, err := o.Status(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	st := &Status{App: c.App, Schema: c.Schema, At: time.Now().UTC(), Election: StatusElection{Mode: relay.ElectionName(c.Relay.Election)}}
	for _, t := range full.Types {
		_, routed := c.Route(t.Type)
		// A type with no rows gets a line when the config routes it: "0
		// pending" is an answer an operator wants to see, and so is its
		// owner.
		if !t.Counted && !routed {
			continue
		}
		st.Types = append(st.Types, StatusType{
			Type: t.Type, Routed: routed, Owner: t.Owner, Pending: t.Pending, Scheduled: t.Scheduled, InFlight: t.InFlight, Dead: t.Dead,
			DeliveredLastHr: t.DeliveredLastHour, OldestPendingSec: t.OldestPending.Seconds(),
			InDoubt: t.InDoubt, OldestInDoubtSec: t.OldestInDoubt.Seconds(), Route: statusRoute(t.Route), Paused: statusPause(t.Paused),
		})
	}
	// Routed types first, each part by type (ops sorts by type).
	slices.SortStableFunc(st.Types, func(a, b StatusType) int {
		switch {
		case a.Routed == b.Routed:
			return 0
		case a.Routed:
			return -1
		}
		return 1
	})
	if c.Receive != nil {
		st.Election.Mode = "receive"
	}
	for _, e := range full.Elections {
		if e.Err != nil {
			return nil, fmt.Errorf("status: election: %w", e.Err)
		}
		statusElection(e.Leader, &st.Election)
	}
	return st, nil
}

func statusPause(p *ops.RoutePause) *pausedJSON {
	if p == nil {
		return nil
	}
	j := pauseJSON(*p)
	return &j
}

func statusRoute(r *ops.Route) *StatusRoute {
	if r == nil {
		return nil
	}
	sr := &StatusRoute{Name: r.Name, State: r.State, Since: r.Since, Failures: r.Failures, LastError: r.LastError, Recorded: r.Recorded}
	if !r.Until.IsZero() {
		u := r.Until
		sr.Until = &u
	}
	return sr
}

// statusElection fills e with the app's election holder h.
func statusElection(h ops.Leader, e *StatusElection) {
	e.Holder, e.Epoch = h.Holder, h.Epoch
	if !h.Since.IsZero() && h.Holder != "" {
		since := h.Since.UTC()
		e.Since = &since
	}
	if h.Holder != "" {
		if host, pid, id, ok := relayName(h.Holder); ok {
			e.Host, e.PID, e.RelayID = host, pid, id
		} else {
			e.NotARelay = true
		}
		if !h.Expires.IsZero() {
			exp := h.Expires.UTC()
			e.Expires = &exp
		}
	}
	e.Lapsed, e.Health, e.Outsider = h.Lapsed, h.Health, h.Outsider
}

// writeElection says who holds the election, and what is wrong with it.
func writeElection(w io.Writer, e *StatusElection) {
	switch {
	case e.Holder == "" && e.Lapsed != "":
		fmt.Fprintf(w, "election: leader, no holder: the lease of %s ran out without being given up (that relay crashed, or runs and cannot renew: see its /readyz)\n", e.Lapsed)
	case e.Holder == "":
		fmt.Fprintln(w, "election: leader, no holder (no relay of this app is running)")
	case e.NotARelay:
		fmt.Fprintf(w, "election: leader, held by %q (epoch %d), which is not a relay's name: a session that is not a relay wrote the election's row; relays stand by until its lease runs out\n", e.Holder, e.Epoch)
	default:
		since := ""
		if e.Since != nil {
			since = fmt.Sprintf(", for %s", time.Since(*e.Since).Round(time.Second))
		}
		fmt.Fprintf(w, "election: leader, held by %s (relay %s on host %s, pid %d; epoch %d%s)\n", e.Holder, e.RelayID, e.Host, e.PID, e.Epoch, since)
	}
	if e.Holder != "" && e.Health != "" {
		fmt.Fprintf(w, "election: the leader reports it is not ready: %s\n", e.Health)
	}
	if e.Outsider != "" {
		fmt.Fprintf(w, "election: %s: not a relay, and it no longer stops relays (ADR 0025)\n", e.Outsider)
	}
}

func writeStatus(out io.Writer, st *Status) {
	w := visibleWriter{out}
	fmt.Fprintf(w, "app %s  schema %s  at %s\n", st.App, st.Schema, st.At.Format(time.RFC3339))
	switch {
	case st.Election.Mode == "none":
		fmt.Fprintln(w, "election: none (every replica relays)")
	case st.Election.Mode == "receive":
		fmt.Fprintln(w, "election: none (a receive daemon's config: this app relays nothing; its consumers: 'mensageria owners list')")
	default:
		writeElection(w, &st.Election)
	}
	tw, rows := newTable(out, tabwriter.AlignRight)
	fmt.Fprintln(rows, "TYPE\tOWNER\tPENDING\tSCHEDULED\tIN FLIGHT\tDEAD\tDELIVERED 1H\tOLDEST PENDING\t")
	var unowned []string
	for _, t := range st.Types {
		owner := t.Owner
		switch {
		case owner == "":
			owner = "-"
			if t.Pending+t.Scheduled > 0 {
				unowned = append(unowned, t.Type)
			}
		case owner != st.App && t.Routed:
			owner += " (!)"
		}
		oldest := "-"
		if t.Pending > 0 {
			oldest = (time.Duration(t.OldestPendingSec * float64(time.Second))).Round(time.Millisecond).String()
		}
		fmt.Fprintf(rows, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t\n", t.Type, owner, t.Pending, t.Scheduled, t.InFlight, t.Dead, t.DeliveredLastHr, oldest)
	}
	_ = tw.Flush()
	for _, t := range st.Types {
		if t.InDoubt > 0 {
			fmt.Fprintf(w, "in doubt: %s has %d message(s) whose attempt may have reached the receiver (the oldest %s ago); the relay will not send them again: 'mensageria doubt list'\n",
				t.Type, t.InDoubt, (time.Duration(t.OldestInDoubtSec * float64(time.Second))).Round(time.Second))
		}
	}
	for _, t := range st.Types {
		if t.Routed && t.Owner != "" && t.Owner != st.App {
			fmt.Fprintf(w, "(!) %s is routed by this config but owned by app %s: app %s's running relays do not claim it (they stop within one lease of a move), and a relay of app %s refuses to start until it moves back ('mensageria owners transfer')\n", t.Type, t.Owner, st.App, st.App)
		}
	}
	if len(unowned) > 0 {
		fmt.Fprintf(w, "no app owns %s: those rows stay pending until their app's relay starts (or 'mensageria owners register')\n", strings.Join(unowned, ", "))
	}
	for _, t := range st.Types {
		if p := t.Paused; p != nil {
			fmt.Fprintf(w, "%s: paused by %s since %s: %s; no relay of app %s claims it, its messages stay pending ('mensageria routes resume %s')\n",
				t.Type, p.PausedBy, p.PausedAt.Format(time.RFC3339), p.Reason, p.App, t.Type)
		}
	}
	// A route that is not flowing is the one thing an operator must act
	// on; a flowing one is the normal case and says nothing.
	for _, t := range st.Types {
		r := t.Route
		if r == nil || r.State == string(mensageria.RouteFlowing) {
			continue
		}
		line := fmt.Sprintf("%s: route %s %s since %s (%d destination failures in a row)", t.Type, r.Name, r.State, r.Since.Format(time.RFC3339), r.Failures)
		if r.Until != nil {
			line += ", next probe at " + r.Until.Format(time.RFC3339)
		}
		if r.LastError != "" {
			line += ": " + r.LastError
		}
		fmt.Fprintln(w, line+"; its messages wait without spending attempts, and it resumes by itself once the destination answers")
	}
}

func (a *app) statusCommand() *cobra.Command {
	var asJSON, watch bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the outbox per type: owning app, pending, in flight, dead, delivered, oldest age, election holder",
		Args:  noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			c, b, err := a.connectCurrent(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			ctx := cmd.Context()
			for first := true; ; first = false {
				st, err := collectStatus(ctx, c, ops.New(b.Driver, ops.ForApps(c.App)))
				if err != nil {
					if ctx.Err() != nil && !first {
						return nil
					}
					return err
				}
				if asJSON {
					if err := json.NewEncoder(a.io.Out).Encode(st); err != nil {
						return err
					}
				} else {
					if watch && isTerminal(a.io.Out) {
						fmt.Fprint(a.io.Out, "\x1b[H\x1b[2J")
					} else if !first {
						fmt.Fprintln(a.io.Out)
					}
					writeStatus(a.io.Out, st)
				}
				if !watch {
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(interval):
				}
			}
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (one object per refresh with --watch)")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "refresh until interrupted")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "refresh interval with --watch")
	return cmd
}
