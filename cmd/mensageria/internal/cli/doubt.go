package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/ops"
)

// DoubtMessage is one message in doubt as `doubt list|show --json` print it.
type DoubtMessage struct {
	DeadMessage
	// AttemptedAt is when the attempt that may have reached the receiver
	// began (the relay's mark).
	AttemptedAt *time.Time `json:"attempted_at"`
	// Resolutions are the decisions recorded about this message, newest
	// first (show only).
	Resolutions []DoubtResolution `json:"resolutions,omitempty"`
}

// DoubtPage is what `doubt list --json` prints: a page of messages in
// doubt, and whether more follow (then NextAfter is the --after of the
// next page).
type DoubtPage struct {
	Messages  []DoubtMessage `json:"messages"`
	Truncated bool           `json:"truncated"`
	NextAfter int64          `json:"next_after,omitempty"`
}

// DoubtResolution is one recorded decision about a message in doubt.
type DoubtResolution struct {
	Outcome string    `json:"outcome"`
	By      string    `json:"by"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

func doubtOf(m ops.Message, full bool) DoubtMessage {
	d := DoubtMessage{DeadMessage: deadOf(m, full), AttemptedAt: m.AttemptedAt}
	for _, r := range m.Resolutions {
		d.Resolutions = append(d.Resolutions, DoubtResolution{Outcome: string(r.Outcome), By: r.By, Reason: r.Reason, At: r.At})
	}
	return d
}

// operator names who runs a command, for the record of a resolution.
func operator() string {
	who := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		who = u.Username
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		who += "@" + h
	}
	return who
}

const doubtLong = `doubt operates the messages of at_most_once routes whose attempt may have
reached the receiver without the relay learning what happened (a timeout,
a connection cut after the request was written, the relay dying after it
marked the attempt). The relay never sends them again by itself; a route's
reconcile probe asks the receiver, and these commands are the operator's.

  doubt list [--type T]                         one line per message in doubt
  doubt show ID                                 everything about one, and its recorded resolutions
  doubt resolve ID... --outcome O --reason R    decide: delivered (the receiver has it),
                                                retry (it does not: one more attempt),
                                                dead (nobody sends it again)

Every resolution is recorded with who (--by, default the OS user@host),
when (the database clock) and why (--reason, required), and 'doubt show'
prints them. Only rows still in doubt change: one being probed or sent is
left alone and reported. Scope as for 'dead': the config's app's types,
or every app's with --all-apps.`

func (a *app) doubtCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "doubt",
		Short: "List, show and resolve messages in doubt (at_most_once routes)",
		Long:  doubtLong,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return daemon.Usage("doubt needs a sub-command: list, show or resolve (see 'mensageria doubt --help')")
		},
	}

	cmd.AddCommand(a.doubtListCommand(), a.doubtShowCommand(), a.doubtResolveCommand())
	return cmd
}

func (a *app) doubtListCommand() *cobra.Command {
	var o listOptions
	list := &cobra.Command{
		Use:   "list",
		Short: "List messages in doubt",
		Args:  noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			c, page, err := a.listInScope(cmd.Context(), ops.StateInDoubt, o)
			if err != nil {
				return err
			}
			if o.json {
				out := DoubtPage{Messages: make([]DoubtMessage, len(page.Messages)), Truncated: page.Truncated, NextAfter: page.NextAfter}
				for i, m := range page.Messages {
					out.Messages[i] = doubtOf(m, false)
				}
				return json.NewEncoder(a.io.Out).Encode(out)
			}
			if len(page.Messages) == 0 {
				fmt.Fprintf(a.io.Out, "no messages in doubt of app %s\n", c.App)
				return nil
			}
			tw, rows := newTable(a.io.Out, 0)
			fmt.Fprintln(rows, "ID\tTYPE\tKEY\tATTEMPTS\tATTEMPTED\tLAST ROUTE\tLAST ERROR")
			for _, m := range page.Messages {
				at := "-"
				if m.AttemptedAt != nil {
					at = m.AttemptedAt.Format(time.RFC3339)
				}
				fmt.Fprintf(rows, "%d\t%s\t%s\t%d\t%s\t%s\t%s\n", m.ID, m.Type, oneLine(m.Key, 40), m.Attempts, at, cellOr(oneLine(m.LastRoute, 50)), oneLine(m.LastError, 100))
			}
			_ = tw.Flush()
			o.nextPage(a.io.Out, page)
			return nil
		}),
	}
	o.bind(list, "every app's messages in doubt (for a DBA)")
	return list
}

func (a *app) doubtShowCommand() *cobra.Command {
	var showJSON, showAll bool
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show one message in doubt in full, with its recorded resolutions",
		Args:  exactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return a.doubtShow(cmd.Context(), args, showAll, showJSON)
		}),
	}
	show.Flags().BoolVar(&showJSON, "json", false, "print JSON")
	show.Flags().BoolVar(&showAll, "all-apps", false, "show a message of any app (for a DBA)")
	return show
}

// doubtShow prints one message in doubt, or the resolutions recorded for
// one resolved delivered, which is gone from the outbox.
func (a *app) doubtShow(ctx context.Context, args []string, showAll, showJSON bool) error {
	ids, err := parseIDs(args)
	if err != nil {
		return err
	}
	c, b, op, err := a.connectInScope(ctx, showAll)
	if err != nil {
		return err
	}
	defer b.Close()
	m, err := op.ShowInDoubt(ctx, ids[0])
	if errors.Is(err, ops.ErrNotFound) {
		return daemon.Fail("no message with id %d in schema %s, and no resolution recorded for one", ids[0], c.Schema)
	}
	if err != nil {
		return refusal(ctx, op, err)
	}
	d := doubtOf(*m, !m.Gone)
	if showJSON {
		enc := json.NewEncoder(a.io.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}
	w := visibleWriter{a.io.Out}
	state := "gone from the outbox (resolved delivered)"
	if !m.Gone {
		state = string(m.State)
	}
	at := "-"
	if d.AttemptedAt != nil {
		at = d.AttemptedAt.Format(time.RFC3339Nano)
	}
	fmt.Fprintf(w, "id          %d\nmessage id  %s\ntype        %s\nkey         %s\nstate       %s\nattempts    %d\nattempted   %s\nlast route  %s\nlast error  %s\n",
		d.ID, d.MessageID, d.Type, d.Key, state, d.Attempts, at, cellOr(d.LastRoute), d.LastError)
	if !m.Gone {
		fmt.Fprintf(w, "payload     %s\n", string(m.Payload))
	}
	for _, r := range d.Resolutions {
		fmt.Fprintf(w, "resolved    %s by %s at %s: %s\n", r.Outcome, r.By, r.At.Format(time.RFC3339), r.Reason)
	}
	return nil
}

func (a *app) doubtResolveCommand() *cobra.Command {
	var outcome, reason, by string
	var yes, asJSON, allApps, keep bool
	cmd := &cobra.Command{
		Use:   "resolve ID... --outcome delivered|retry|dead --reason WHY",
		Short: "Decide what happened to messages in doubt, recorded with who, when and why",
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			if len(ids) == 0 {
				return daemon.Usage("doubt resolve needs message ids (the numbers 'doubt list' shows)")
			}
			if by == "" {
				by = operator()
			}
			d := ops.Decision{IDs: ids, Outcome: ops.Outcome(outcome), By: by, Reason: reason, KeepDelivered: keep}
			if err := d.Check(); err != nil {
				return daemon.Usage("%v (see 'mensageria doubt resolve --help')", err)
			}
			ctx := cmd.Context()
			c, b, op, err := a.connectInScope(ctx, allApps)
			if err != nil {
				return err
			}
			defer b.Close()
			p, err := op.PlanResolve(ctx, d)
			if err != nil {
				return refusal(ctx, op, err)
			}
			if len(ids) > 1 && !yes {
				ok, err := confirm(a, fmt.Sprintf("Resolve %d messages in doubt (%s) as %s in schema %s?", len(ids), joinIDs(ids), outcome, c.Schema))
				if err != nil {
					return err
				}
				if !ok {
					fmt.Fprintln(a.io.Err, "nothing changed")
					return silentExit(ExitFailure)
				}
			}
			res, err := op.Apply(ctx, p)
			if errors.Is(err, ops.ErrInvalidDecision) {
				return daemon.Usage("%v", err)
			}
			if err != nil {
				return err
			}
			return a.printResolved(res, outcome, by, asJSON)
		}),
	}
	cmd.Flags().StringVar(&outcome, "outcome", "", "delivered (the receiver has the effect), retry (it does not: one more attempt) or dead")
	cmd.Flags().StringVar(&reason, "reason", "", "why (required): what you checked, a ticket")
	cmd.Flags().StringVar(&by, "by", "", "who decides (default: the OS user@host)")
	cmd.Flags().BoolVar(&keep, "keep", false, "with --outcome delivered, keep the row as delivered instead of deleting it")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&allApps, "all-apps", false, "act on messages of any app (for a DBA)")
	return cmd
}

// printResolved says what doubt resolve changed; rows it left alone make
// the exit code a failure.
func (a *app) printResolved(res *ops.Result, outcome, by string, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(a.io.Out).Encode(map[string]any{"outcome": outcome, "by": by, "resolved": orEmpty(res.Resolved), "not_in_doubt": orEmpty(res.NotInDoubt)})
	}
	fmt.Fprintf(a.io.Out, "%d message(s) resolved %s by %s\n", len(res.Resolved), outcome, by)
	if len(res.NotInDoubt) > 0 {
		fmt.Fprintf(a.io.Err, "note: %s not in doubt (settled, being probed or sent, or no such row) and left alone\n", joinIDs(res.NotInDoubt))
		return silentExit(ExitFailure)
	}
	return nil
}

func orEmpty(ids []int64) []int64 {
	if ids == nil {
		return []int64{}
	}
	return ids
}
