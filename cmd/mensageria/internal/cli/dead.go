package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/xadm/mensageria/cmd/mensageria/internal/console"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/redact"
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

func deadOf(j driver.Job, full bool) DeadMessage {
	// redact: a row written before the relay masked its reasons may
	// still quote a secret of a URL.
	d := DeadMessage{ID: j.ID, MessageID: uuid.UUID(j.MessageID).String(), Type: j.Type, Key: j.Key, Attempts: j.Attempt, CreatedAt: j.CreatedAt.UTC(), LastError: redact.Text(j.LastError),
		LastRoute: redact.Text(j.LastRoute), Owner: j.Owner}
	if full {
		if json.Valid(j.Payload) {
			d.Payload = j.Payload
		}
		if len(j.Headers) > 0 {
			_ = json.Unmarshal(j.Headers, &d.Headers)
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
				return nil, usageErr("%q is not a message id (the number 'dead list' shows in its ID column)", f)
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

// deadScope is what one dead command may act on: the types the catalog
// gives the config's app, or, with --all-apps, every row of the schema.
type deadScope struct {
	app     string
	schema  string
	allApps bool
	types   []string // the app's own types; unused with allApps
}

// connectInScope connects to the config's current schema and resolves the
// scope of a dead or doubt command: the app's types, or every app's.
func (a *app) connectInScope(ctx context.Context, allApps bool) (*Config, *backend, deadScope, error) {
	c, b, err := a.connectCurrent(ctx)
	if err != nil {
		return nil, nil, deadScope{}, err
	}
	scope, err := newDeadScope(ctx, c, b.drv, allApps)
	if err != nil {
		b.Close()
		return nil, nil, deadScope{}, err
	}
	return c, b, scope, nil
}

func newDeadScope(ctx context.Context, c *Config, drv driver.Driver, allApps bool) (deadScope, error) {
	s := deadScope{app: c.App, schema: c.Schema, allApps: allApps}
	if allApps {
		return s, nil
	}
	var err error
	s.types, err = ownedTypes(ctx, drv, c.App)
	return s, err
}

// filter narrows the types a command asked for (none: all of the scope's)
// to the scope, refusing a type of another app with its owner's name.
func (s deadScope) filter(ctx context.Context, drv driver.Driver, asked []string) ([]string, error) {
	if s.allApps {
		return asked, nil
	}
	if len(asked) == 0 {
		return s.types, nil
	}
	for _, t := range asked {
		if slices.Contains(s.types, t) {
			continue
		}
		o, ok, err := lookupOwner(ctx, drv, driver.ResourceType, t)
		if err != nil {
			return nil, err
		}
		owner := "no app owns it"
		if ok {
			owner = "it is owned by " + quoteApp(o.App)
		}
		return nil, usageErr("message type %q is not app %s's (%s): its dead letters are not this config's to touch; nothing changed (use the owning app's config, or --all-apps to act across apps)", t, s.app, owner)
	}
	return asked, nil
}

// check refuses rows whose type the scope does not own, naming the owner.
func (s deadScope) check(jobs []driver.Job) error {
	if s.allApps {
		return nil
	}
	for _, j := range jobs {
		if !slices.Contains(s.types, j.Type) {
			owner := "no app owns its type"
			if j.Owner != "" {
				owner = "its type is owned by app " + strconv.Quote(j.Owner)
			}
			return usageErr("message %d (type %s) is not app %s's: %s; nothing changed (use the owning app's config, or --all-apps to act across apps)", j.ID, j.Type, s.app, owner)
		}
	}
	return nil
}

// none reports an app that owns no types: with an empty type list a
// filter would select every app's rows.
func (s deadScope) none() bool { return !s.allApps && len(s.types) == 0 }

// listOptions are the flags the dead and doubt list commands share: which
// types, how many, from where, as JSON, and whether every app's.
type listOptions struct {
	types []string
	limit int
	after int64
	json  bool
	all   bool
}

// maxListLimit is the largest page a list command prints; more is paged
// with --after.
const maxListLimit = 10000

func (o *listOptions) bind(list *cobra.Command, allAppsHelp string) {
	list.Flags().StringSliceVarP(&o.types, "type", "t", nil, "only these types (repeatable)")
	list.Flags().IntVar(&o.limit, "limit", 100, fmt.Sprintf("at most this many (1 to %d; page on with --after)", maxListLimit))
	list.Flags().Int64Var(&o.after, "after", 0, "only ids after this one (paging)")
	list.Flags().BoolVar(&o.json, "json", false, "print JSON")
	list.Flags().BoolVar(&o.all, "all-apps", false, allAppsHelp)
}

// check refuses a --limit out of range: the driver would quietly list
// 100 instead.
func (o *listOptions) check() error {
	if o.limit < 1 || o.limit > maxListLimit {
		return usageErr("--limit must be between 1 and %d, got %d (page on with --after ID)", maxListLimit, o.limit)
	}
	return nil
}

// listPage is one page of a list command: its rows, and whether more
// follow (asked for as the row after the page).
type listPage struct {
	jobs      []driver.Job
	truncated bool
	nextAfter int64 // the --after of the next page when truncated
}

// nextPage tells how to ask for the next page when more rows follow.
func (o *listOptions) nextPage(out io.Writer, p listPage) {
	if p.truncated {
		fmt.Fprintf(out, "(first %d; more follow: next page with --after %d)\n", o.limit, p.nextAfter)
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
func (a *app) listInScope(ctx context.Context, state driver.State, o listOptions) (*Config, deadScope, listPage, error) {
	if err := o.check(); err != nil {
		return nil, deadScope{}, listPage{}, err
	}
	c, b, scope, err := a.connectInScope(ctx, o.all)
	if err != nil {
		return nil, deadScope{}, listPage{}, err
	}
	defer b.Close()
	types, err := scope.filter(ctx, b.drv, o.types)
	if err != nil || scope.none() {
		return c, scope, listPage{}, err
	}
	// One row more than the page says whether more follow.
	limit := o.limit + 1
	if o.limit == maxListLimit {
		limit = o.limit // the driver's own bound; the next page tells
	}
	jobs, err := b.drv.ListMessages(ctx, driver.ListFilter{State: state, Types: types, AfterID: o.after, Limit: limit})
	p := listPage{jobs: jobs}
	if len(jobs) > o.limit || (len(jobs) == maxListLimit && o.limit == maxListLimit) {
		p.jobs, p.truncated = jobs[:o.limit], true
		p.nextAfter = p.jobs[len(p.jobs)-1].ID
	}
	return c, scope, p, err
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
			return usageErr("dead needs a sub-command: list, show, retry or discard (see 'mensageria dead --help')")
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
			c, scope, page, err := a.listInScope(cmd.Context(), driver.StateDead, o)
			if err != nil {
				return err
			}
			jobs := page.jobs
			if o.json {
				out := DeadPage{Messages: make([]DeadMessage, len(jobs)), Truncated: page.truncated, NextAfter: page.nextAfter}
				for i, j := range jobs {
					out.Messages[i] = deadOf(j, false)
				}
				return json.NewEncoder(a.io.Out).Encode(out)
			}
			if len(jobs) == 0 {
				switch {
				case scope.none():
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
			for _, j := range jobs {
				fmt.Fprintf(rows, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", j.ID, j.Type, ownerCell(j.Owner), oneLine(j.Key, 40), j.Attempt, j.CreatedAt.UTC().Format(time.RFC3339),
					cellOr(oneLine(redact.Text(j.LastRoute), 50)), oneLine(redact.Text(j.LastError), 100))
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
	c, b, scope, err := a.connectInScope(ctx, showAll)
	if err != nil {
		return err
	}
	defer b.Close()
	jobs, err := b.drv.ListMessages(ctx, driver.ListFilter{IDs: ids, Limit: 1})
	if err != nil {
		return err
	}
	if len(jobs) == 0 {
		return failErr("no message with id %d in schema %s", ids[0], c.Schema)
	}
	if err := scope.check(jobs); err != nil {
		return err
	}
	j := jobs[0]
	if j.State != driver.StateDead {
		fmt.Fprintf(a.io.Err, "note: message %d is %s, not dead\n", j.ID, j.State)
	}
	d := deadOf(j, true)
	if showJSON {
		enc := json.NewEncoder(a.io.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}
	w := visibleWriter{a.io.Out}
	fmt.Fprintf(w, "id          %d\nmessage id  %s\ntype        %s\nowner       %s\nkey         %s\nstate       %s\nattempts    %d\ncreated     %s\n",
		d.ID, d.MessageID, d.Type, ownerCell(d.Owner), d.Key, j.State, d.Attempts, d.CreatedAt.Format(time.RFC3339Nano))
	hk := make([]string, 0, len(d.Headers))
	for k := range d.Headers {
		hk = append(hk, k)
	}
	slices.Sort(hk)
	for _, k := range hk {
		fmt.Fprintf(w, "header      %s: %s\n", k, d.Headers[k])
	}
	fmt.Fprintf(w, "last route  %s\nlast error  %s\npayload     %s\n", cellOr(d.LastRoute), d.LastError, string(j.Payload))
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
				return usageErr("dead %s needs message ids or --type (see 'mensageria dead %s --help')", verb, verb)
			}
			if len(ids) > 0 && len(types) > 0 {
				return usageErr("dead %s takes message ids or --type, not both", verb)
			}
			ctx := cmd.Context()
			c, b, scope, err := a.connectInScope(ctx, allApps)
			if err != nil {
				return err
			}
			defer b.Close()
			p := driver.ReviveParams{IDs: ids, Types: types, Discard: discard, ClearMark: allowDuplicate}
			var left []string // the ids named that are not dead letters, and why
			if len(types) > 0 {
				if _, err := scope.filter(ctx, b.drv, types); err != nil {
					return err
				}
			} else {
				// Every id is checked before anything changes: one row of
				// another app refuses the whole call; ids that are not
				// dead letters are named, and the others acted on.
				jobs, err := b.drv.ListMessages(ctx, driver.ListFilter{IDs: ids, Limit: len(ids)})
				if err != nil {
					return err
				}
				if err := scope.check(jobs); err != nil {
					return err
				}
				p.IDs, left = deadAmong(ids, jobs)
				if len(p.IDs) == 0 {
					return failErr("nothing to %s in schema %s: %s; nothing changed", verb, c.Schema, strings.Join(left, ", "))
				}
			}
			if !discard {
				if err := a.checkMarked(ctx, b.drv, p, verb); err != nil {
					return err
				}
			}
			if err := a.confirmRevive(cmd, b.drv, verb, c.Schema, p.IDs, types, yes); err != nil {
				return err
			}
			n, err := b.drv.Revive(ctx, p)
			if err != nil {
				return err
			}
			return a.printRevived(verb, n, left, asJSON)
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

// deadAmong splits the ids asked for into the dead letters among jobs
// (the rows found) and the others, each named with why it is left alone.
func deadAmong(ids []int64, jobs []driver.Job) (dead []int64, left []string) {
	byID := make(map[int64]driver.Job, len(jobs))
	for _, j := range jobs {
		byID[j.ID] = j
	}
	for _, id := range ids {
		j, ok := byID[id]
		switch {
		case !ok:
			left = append(left, fmt.Sprintf("%d (no such message)", id))
		case j.State != driver.StateDead:
			left = append(left, fmt.Sprintf("%d (%s, not dead)", id, strings.ReplaceAll(string(j.State), "_", " ")))
		default:
			dead = append(dead, id)
		}
	}
	return dead, left
}

// checkMarked refuses a retry that selects dead letters an at-most-once
// attempt marked, unless p.ClearMark (--allow-duplicate): their last
// request may have reached the receiver, so sending again may apply the
// effect twice (ADR 0015). With the flag it warns, naming them.
func (a *app) checkMarked(ctx context.Context, drv driver.Driver, p driver.ReviveParams, verb string) error {
	marked, err := driver.MarkedDead(ctx, drv, p)
	if err != nil || len(marked) == 0 {
		return err
	}
	if p.ClearMark {
		fmt.Fprintf(a.io.Err, "warning: %d dead message(s) of at_most_once routes (%s) will be sent again although their last attempt may have reached the receiver: an effect it applied will apply twice\n",
			len(marked), joinIDs(marked))
		return nil
	}
	return usageErr("%d dead message(s) (%s) belong to at_most_once routes and their last attempt may have reached the receiver: "+
		"sending again may apply the effect twice; nothing changed. Check the receiver: if it does not have the effect, run 'mensageria dead %s --allow-duplicate' "+
		"with the same selection; if it does, 'mensageria dead discard' them (messages still in doubt are decided with 'mensageria doubt resolve')",
		len(marked), joinIDs(marked), verb)
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
func (a *app) confirmRevive(cmd *cobra.Command, drv driver.Driver, verb, schema string, ids []int64, types []string, yes bool) error {
	if len(ids) < 2 && len(types) == 0 {
		return nil
	}
	what := fmt.Sprintf("%d dead messages (%s)", len(ids), joinIDs(ids))
	if len(types) > 0 {
		n, err := countDead(cmd, drv, types)
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

func joinIDs(ids []int64) string { return console.IDList(ids) }

func countDead(cmd *cobra.Command, drv driver.Driver, types []string) (int64, error) {
	stats, err := drv.Stats(cmd.Context())
	if err != nil {
		return 0, err
	}
	var n int64
	for _, s := range stats {
		for _, t := range types {
			if s.Type == t {
				n += s.Dead
			}
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
