package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/ops"
)

// DeadMessage is one dead letter as `dead list|show --json` print it.
type DeadMessage struct {
	ID        int64     `json:"id"`
	MessageID string    `json:"message_id"`
	Type      string    `json:"type"`
	Key       string    `json:"key"`
	Attempts  int       `json:"attempts"`
	CreatedAt time.Time `json:"created_at"`
	LastError string    `json:"last_error"`
	// LastRoute says which app and destination gave the last error.
	LastRoute string `json:"last_route"`
	// Owner is the type's owning app in the catalog ("" for none).
	Owner   string            `json:"owner"`
	Payload json.RawMessage   `json:"payload,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

func deadOf(m ops.Message, full bool) DeadMessage {
	d := DeadMessage{ID: m.ID, MessageID: m.MessageID, Type: m.Type, Key: m.Key, Attempts: m.Attempts, CreatedAt: m.CreatedAt, LastError: m.LastError,
		LastRoute: m.LastRoute, Owner: m.Owner}
	if full {
		if json.Valid(m.Payload) {
			d.Payload = m.Payload
		}
		if len(m.Headers) > 0 {
			_ = json.Unmarshal(m.Headers, &d.Headers)
		}
	}
	return d
}

func parseIDs(args []string) ([]int64, error) {
	ids := make([]int64, 0, len(args))
	for _, a := range args {
		for _, f := range strings.Split(a, ",") {
			if f == "" {
				continue
			}
			id, err := strconv.ParseInt(f, 10, 64)
			if err != nil || id <= 0 {
				return nil, daemon.Usage("%q is not a message id (the number 'dead list' shows in its ID column)", f)
			}
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// oneLine fits s on one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return s
}

// connectInScope connects to the config's current schema and returns the
// operator's verbs within the scope of a dead or doubt command: the types
// the catalog gives the config's app, or, with --all-apps, every app's.
func (a *app) connectInScope(ctx context.Context, allApps bool) (*config.Config, *daemon.DB, *ops.Ops, error) {
	c, b, err := a.connectCurrent(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	scope := ops.ForApps(c.App)
	if allApps {
		scope = ops.AllApps()
	}
	return c, b, ops.New(b.Driver, scope), nil
}

// refusal words ops' refusals as the command's usage errors (exit 2);
// any other error is returned as it is.
func refusal(ctx context.Context, o *ops.Ops, err error) error {
	var oos *ops.OutOfScopeError
	var amo *ops.AtMostOnceError
	switch {
	case errors.As(err, &oos) && oos.ID != 0:
		owner := "no app owns its type"
		if oos.Owner != "" {
			owner = "its type is owned by app " + strconv.Quote(oos.Owner)
		}
		return daemon.Usage("message %d (type %s) is not app %s's: %s; nothing changed (use the owning app's config, or --all-apps to act across apps)", oos.ID, oos.Type, strings.Join(oos.Apps, ", "), owner)
	case errors.As(err, &oos):
		owner := "no app owns it"
		// An entry the upgrade to the catalog left unclaimed is named so.
		if e, lerr := o.Owner(ctx, mensageria.ResourceType, oos.Type); lerr == nil {
			owner = "it is owned by " + quoteApp(e.App)
		}
		return daemon.Usage("message type %q is not app %s's (%s): its dead letters are not this config's to touch; nothing changed (use the owning app's config, or --all-apps to act across apps)", oos.Type, strings.Join(oos.Apps, ", "), owner)
	case errors.As(err, &amo):
		return daemon.Usage("%d dead message(s) (%s) belong to at_most_once routes and their last attempt may have reached the receiver: "+
			"sending again may apply the effect twice; nothing changed. Check the receiver: if it does not have the effect, run 'mensageria dead retry --allow-duplicate' "+
			"with the same selection; if it does, 'mensageria dead discard' them (messages still in doubt are decided with 'mensageria doubt resolve')",
			len(amo.IDs), joinIDs(amo.IDs))
	case errors.Is(err, ops.ErrNoAtMostOnce):
		return daemon.Fail("this database's driver keeps no messages in doubt (no at-most-once support)")
	}
	return err
}

// listOptions are the flags the dead and doubt list commands share: which
// types, how many, from where, as JSON, and whether every app's.
type listOptions struct {
	types []string
	limit int
	after int64
	json  bool
	all   bool
}

func (o *listOptions) bind(list *cobra.Command, allAppsHelp string) {
	list.Flags().StringSliceVarP(&o.types, "type", "t", nil, "only these types (repeatable)")
	list.Flags().IntVar(&o.limit, "limit", 100, fmt.Sprintf("at most this many (1 to %d; page on with --after)", ops.MaxLimit))
	list.Flags().Int64Var(&o.after, "after", 0, "only ids after this one (paging)")
	list.Flags().BoolVar(&o.json, "json", false, "print JSON")
	list.Flags().BoolVar(&o.all, "all-apps", false, allAppsHelp)
}

// check refuses a --limit out of range: the driver would quietly list
// 100 instead.
func (o *listOptions) check() error {
	if o.limit < 1 || o.limit > ops.MaxLimit {
		return daemon.Usage("--limit must be between 1 and %d, got %d (page on with --after ID)", ops.MaxLimit, o.limit)
	}
	return nil
}

// nextPage tells how to ask for the next page when more rows follow.
func (o *listOptions) nextPage(out io.Writer, p *ops.Page) {
	if p.Truncated {
		fmt.Fprintf(out, "(first %d; more follow: next page with --after %d)\n", o.limit, p.NextAfter)
	}
}

// DeadPage is what `dead list --json` prints: a page of dead letters, and
// whether more follow (then NextAfter is the --after of the next page).
type DeadPage struct {
	Messages  []DeadMessage `json:"messages"`
	Truncated bool          `json:"truncated"`
	NextAfter int64         `json:"next_after,omitempty"`
}

// listInScope lists the rows in state of the types o.types that the
// config's app may see (every app's with o.all), one page after the id
// o.after, as 'dead list' and 'doubt list' do: a type of another app is
// refused with its owner's name, and an app that owns nothing lists
// nothing.
func (a *app) listInScope(ctx context.Context, state ops.State, o listOptions) (*config.Config, *ops.Page, error) {
	if err := o.check(); err != nil {
		return nil, nil, err
	}
	c, b, op, err := a.connectInScope(ctx, o.all)
	if err != nil {
		return nil, nil, err
	}
	defer b.Close()
	list := op.DeadLetters
	if state == ops.StateInDoubt {
		list = op.InDoubt
	}
	// A negative --after has always listed from the first row.
	page, err := list(ctx, ops.ListParams{Types: o.types, After: max(o.after, 0), Limit: o.limit})
	if err != nil {
		return nil, nil, refusal(ctx, op, err)
	}
	return c, page, nil
}

const deadLong = `dead operates the messages the relay parked as dead (refused permanently by
the destination, or out of attempts), each with its last error.

  dead list [--type T]            one line per dead message
  dead show ID                    everything about one, payload included
  dead retry ID... | --type T     back to pending, attempts from zero
  dead discard ID... | --type T   delete them

Each acts only on the dead letters of the types the ownership catalog gives
the config's app: another app's rows are not listed, and an id or a type of
another app is refused (exit 2) with its owner's name. --all-apps is the
explicit flag for a DBA to act across every app of the schema.

Retrying or discarding more than one message asks for confirmation on
standard input unless --yes is given. An id that is not a dead letter is
named with why, and the command exits 1 (the others are acted on).

A dead letter of an at_most_once route whose last attempt may have
reached the receiver keeps its mark: retrying it is refused (exit 2)
unless --allow-duplicate, which sends it again although the receiver may
apply its effect twice (ADR 0015). Check the receiver first.`

func (a *app) deadCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dead",
		Short: "List, show, retry or discard dead letters",
		Long:  deadLong,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return daemon.Usage("dead needs a sub-command: list, show, retry or discard (see 'mensageria dead --help')")
		},
	}

	cmd.AddCommand(a.deadListCommand(), a.deadShowCommand(), a.reviveCommand(false), a.reviveCommand(true))
	return cmd
}

func (a *app) deadListCommand() *cobra.Command {
	var o listOptions
	list := &cobra.Command{
		Use:   "list",
		Short: "List dead messages",
		Args:  noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			c, page, err := a.listInScope(cmd.Context(), ops.StateDead, o)
			if err != nil {
				return err
			}
			if o.json {
				out := DeadPage{Messages: make([]DeadMessage, len(page.Messages)), Truncated: page.Truncated, NextAfter: page.NextAfter}
				for i, m := range page.Messages {
					out.Messages[i] = deadOf(m, false)
				}
				return json.NewEncoder(a.io.Out).Encode(out)
			}
			if len(page.Messages) == 0 {
				switch {
				case page.NoTypes:
					fmt.Fprintf(a.io.Out, "no dead messages: app %s owns no message types in schema %s (--all-apps lists every app's)\n", c.App, c.Schema)
				case o.all:
					fmt.Fprintln(a.io.Out, "no dead messages")
				default:
					fmt.Fprintf(a.io.Out, "no dead messages of app %s\n", c.App)
				}
				return nil
			}
			tw, rows := newTable(a.io.Out, 0)
			fmt.Fprintln(rows, "ID\tTYPE\tOWNER\tKEY\tATTEMPTS\tCREATED\tLAST ROUTE\tLAST ERROR")
			for _, m := range page.Messages {
				fmt.Fprintf(rows, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", m.ID, m.Type, ownerCell(m.Owner), oneLine(m.Key, 40), m.Attempts, m.CreatedAt.Format(time.RFC3339),
					cellOr(oneLine(m.LastRoute, 50)), oneLine(m.LastError, 100))
			}
			_ = tw.Flush()
			o.nextPage(a.io.Out, page)
			return nil
		}),
	}
	o.bind(list, "every app's dead letters, not only the config's app's (for a DBA)")
	return list
}

func (a *app) deadShowCommand() *cobra.Command {
	var showJSON, showAll bool
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show one dead message in full",
		Args:  exactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return a.deadShow(cmd.Context(), args, showAll, showJSON)
		}),
	}
	show.Flags().BoolVar(&showJSON, "json", false, "print JSON")
	show.Flags().BoolVar(&showAll, "all-apps", false, "show a message of any app (for a DBA)")
	return show
}

// deadShow prints one message in full, saying so when it is not dead.
func (a *app) deadShow(ctx context.Context, args []string, showAll, showJSON bool) error {
	ids, err := parseIDs(args)
	if err != nil {
		return err
	}
	c, b, op, err := a.connectInScope(ctx, showAll)
	if err != nil {
		return err
	}
	defer b.Close()
	m, err := op.Show(ctx, ids[0])
	if errors.Is(err, ops.ErrNotFound) {
		return daemon.Fail("no message with id %d in schema %s", ids[0], c.Schema)
	}
	if err != nil {
		return refusal(ctx, op, err)
	}
	if m.State != ops.StateDead {
		fmt.Fprintf(a.io.Err, "note: message %d is %s, not dead\n", m.ID, m.State)
	}
	d := deadOf(*m, true)
	if showJSON {
		enc := json.NewEncoder(a.io.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}
	w := visibleWriter{a.io.Out}
	fmt.Fprintf(w, "id          %d\nmessage id  %s\ntype        %s\nowner       %s\nkey         %s\nstate       %s\nattempts    %d\ncreated     %s\n",
		d.ID, d.MessageID, d.Type, ownerCell(d.Owner), d.Key, m.State, d.Attempts, d.CreatedAt.Format(time.RFC3339Nano))
	hk := make([]string, 0, len(d.Headers))
	for k := range d.Headers {
		hk = append(hk, k)
	}
	slices.Sort(hk)
	for _, k := range hk {
		fmt.Fprintf(w, "header      %s: %s\n", k, d.Headers[k])
	}
	fmt.Fprintf(w, "last route  %s\nlast error  %s\npayload     %s\n", cellOr(d.LastRoute), d.LastError, string(m.Payload))
	return nil
}

// reviveCommand builds `dead retry` and `dead discard`.
func (a *app) reviveCommand(discard bool) *cobra.Command {
	verb := "retry"
	short := "Move dead messages back to pending, attempts from zero"
	if discard {
		verb = "discard"
		short = "Delete dead messages"
	}
	var types []string
	var yes, asJSON, allApps, allowDuplicate bool
	cmd := &cobra.Command{
		Use:   verb + " ID... | --type T",
		Short: short,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			ids, err := parseIDs(args)
			if err != nil {
				return err
			}
			if len(ids) == 0 && len(types) == 0 {
				return daemon.Usage("dead %s needs message ids or --type (see 'mensageria dead %s --help')", verb, verb)
			}
			if len(ids) > 0 && len(types) > 0 {
				return daemon.Usage("dead %s takes message ids or --type, not both", verb)
			}
			ctx := cmd.Context()
			c, b, op, err := a.connectInScope(ctx, allApps)
			if err != nil {
				return err
			}
			defer b.Close()
			// Every id is checked before anything changes: one row of
			// another app refuses the whole call; ids that are not dead
			// letters are named, and the others acted on.
			sel := ops.Selection{IDs: ids, Types: types, AllowDuplicate: allowDuplicate}
			plan := op.PlanRetry
			if discard {
				plan = op.PlanDiscard
			}
			p, err := plan(ctx, sel)
			if err != nil {
				return refusal(ctx, op, err)
			}
			left := make([]string, len(p.Left))
			for i, l := range p.Left {
				left[i] = l.String()
			}
			if len(ids) > 0 && len(p.IDs) == 0 {
				return daemon.Fail("nothing to %s in schema %s: %s; nothing changed", verb, c.Schema, strings.Join(left, ", "))
			}
			if len(p.Marked) > 0 {
				fmt.Fprintf(a.io.Err, "warning: %d dead message(s) of at_most_once routes (%s) will be sent again although their last attempt may have reached the receiver: an effect it applied will apply twice\n",
					len(p.Marked), joinIDs(p.Marked))
			}
			if err := a.confirmRevive(ctx, op, verb, c.Schema, p.IDs, types, yes); err != nil {
				return err
			}
			res, err := op.Apply(ctx, p)
			if err != nil {
				return err
			}
			return a.printRevived(verb, res.Changed, left, asJSON)
		}),
	}
	cmd.Flags().StringSliceVarP(&types, "type", "t", nil, "every dead message of these types")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&allApps, "all-apps", false, "act on dead letters of any app (for a DBA)")
	if !discard {
		cmd.Flags().BoolVar(&allowDuplicate, "allow-duplicate", false,
			"also send again dead letters of at_most_once routes whose last attempt may have reached the receiver (its effect may apply twice)")
	}
	return cmd
}

// printRevived says what dead retry or discard changed; ids named that
// were not dead letters (left) make the exit code a failure.
func (a *app) printRevived(verb string, n int, left []string, asJSON bool) error {
	done := "back to pending"
	if verb == "discard" {
		done = "deleted"
	}
	if asJSON {
		if err := json.NewEncoder(a.io.Out).Encode(map[string]any{"action": verb, "changed": n, "left_alone": nonNil(left)}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.io.Out, "%d dead message(s) %s\n", n, done)
	}
	if len(left) > 0 {
		fmt.Fprintf(a.io.Err, "note: left alone: %s\n", strings.Join(left, ", "))
		return silentExit(ExitFailure)
	}
	return nil
}

// confirmRevive asks before a dead retry or discard of several messages
// or of whole types, unless yes; a refusal changes nothing and fails.
func (a *app) confirmRevive(ctx context.Context, op *ops.Ops, verb, schema string, ids []int64, types []string, yes bool) error {
	if len(ids) < 2 && len(types) == 0 {
		return nil
	}
	what := fmt.Sprintf("%d dead messages (%s)", len(ids), joinIDs(ids))
	if len(types) > 0 {
		n, err := countDead(ctx, op, types)
		if err != nil {
			return err
		}
		what = fmt.Sprintf("all %d dead messages of type %s", n, strings.Join(types, ", "))
	}
	if yes {
		return nil
	}
	ok, err := confirm(a, fmt.Sprintf("%s %s in schema %s?", strings.ToUpper(verb[:1])+verb[1:], what, schema))
	if err != nil {
		return err
	}
	if !ok {
		fmt.Fprintln(a.io.Err, "nothing changed")
		return silentExit(ExitFailure)
	}
	return nil
}

func ownerCell(app string) string {
	if app == "" {
		return "(none)"
	}
	return app
}

func cellOr(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func joinIDs(ids []int64) string { return ops.IDList(ids) }

func countDead(ctx context.Context, op *ops.Ops, types []string) (int64, error) {
	counts, err := op.Count(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, c := range counts {
		if slices.Contains(types, c.Type) {
			n += c.Dead
		}
	}
	return n, nil
}

// confirm asks on standard input; anything but y/yes is a no, and so is
// end of input, so a script without --yes changes nothing.
func confirm(a *app, question string) (bool, error) {
	fmt.Fprintf(a.io.Err, "%s [y/N] ", question)
	line, err := bufio.NewReader(a.io.In).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(a.io.Err)
		return false, nil
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}
