package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// OwnerEntry is one catalog entry as `owners list --json` prints it.
type OwnerEntry struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// App owns it; empty with Unclaimed for an entry the upgrade to the
	// catalog found in use and left for its app to register.
	App       string `json:"app"`
	Unclaimed bool   `json:"unclaimed"`
	// WindowSeconds is a consumer's dedup window (0: records kept
	// forever); absent for other kinds.
	WindowSeconds *float64  `json:"window_seconds,omitempty"`
	Since         time.Time `json:"since"`
}

func ownerEntryOf(o mensageria.Ownership) OwnerEntry {
	e := OwnerEntry{Kind: string(o.Kind), Name: o.Name, App: o.App, Unclaimed: o.App == "", Since: o.Since.UTC()}
	if o.Kind == mensageria.ResourceConsumer {
		w := o.Window.Seconds()
		e.WindowSeconds = &w
	}
	return e
}

// kinds are the catalog's kinds as the owners commands take them.
var kinds = []mensageria.ResourceKind{mensageria.ResourceType, mensageria.ResourceConsumer, mensageria.ResourceKafkaTransactionalID, mensageria.ResourceMigrations}

func parseKind(s string) (mensageria.ResourceKind, error) {
	k := mensageria.ResourceKind(strings.ReplaceAll(strings.ToLower(s), "-", "_"))
	if slices.Contains(kinds, k) {
		return k, nil
	}
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
	}
	return "", daemon.Usage("unknown kind %q: use %s", s, strings.Join(names, ", "))
}

// thing names a catalog entry in messages.
func thing(k mensageria.ResourceKind, name string) string {
	switch k {
	case mensageria.ResourceType:
		return "message type " + strconv.Quote(name)
	case mensageria.ResourceConsumer:
		return "inbox consumer " + strconv.Quote(name)
	case mensageria.ResourceKafkaTransactionalID:
		return "Kafka transactional id " + strconv.Quote(name)
	case mensageria.ResourceMigrations:
		return "the schema's migrations"
	}
	return string(k) + " " + strconv.Quote(name)
}

// appName shows an owner in messages and tables.
func appName(app string) string {
	if app == "" {
		return "(unclaimed)"
	}
	return app
}

func quoteApp(app string) string {
	if app == "" {
		return "no app (unclaimed)"
	}
	return "app " + strconv.Quote(app)
}

// conflictErr turns a catalog conflict met by app while doing what (a
// *daemon.ConflictError's What) into a
// usage error that names every conflicting entry and its owner, and the
// way out.
func conflictErr(e *mensageria.OwnerConflictError, what, configPath string) error {
	var parts []string
	for _, c := range e.Conflicts {
		verb := "is"
		if c.Kind == mensageria.ResourceMigrations {
			verb = "are"
		}
		parts = append(parts, fmt.Sprintf("%s %s owned by %s", thing(c.Kind, c.Name), verb, quoteApp(c.App)))
	}
	if len(parts) == 0 {
		parts = append(parts, "something it claims is owned by another app")
	}
	nothing := "nothing was claimed"
	if len(e.Conflicts) > 0 && e.Conflicts[0].Kind == mensageria.ResourceMigrations {
		nothing = "nothing was applied"
	}
	msg := fmt.Sprintf("app %q cannot %s: %s; %s", e.App, what, strings.Join(parts, "; "), nothing)
	if len(e.Conflicts) > 0 {
		c := e.Conflicts[0]
		switch {
		case c.Kind == mensageria.ResourceMigrations:
			msg += fmt.Sprintf(". Run 'mensageria migrate up' with app %s's config ('migrate check' is open to every app), or move the migrations with 'mensageria owners transfer migrations %s --from %s --to %s'",
				strconv.Quote(c.App), mensageria.MigrationsName, shellArg(c.App), shellArg(e.App))
		default:
			msg += fmt.Sprintf(". Remove it from %s if it is not this app's, or, if it is moving here, run 'mensageria owners transfer %s %s --from %s --to %s' first",
				configPath, c.Kind, shellArg(c.Name), shellArg(c.App), shellArg(e.App))
		}
	}
	return &daemon.Error{Code: daemon.ExitUsage, Err: errors.New(msg)}
}

// shellArg quotes s for a command line shown to the user, when it needs it.
func shellArg(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:/-", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// humanDuration prints a window the way an operator writes it.
func humanDuration(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d == 0:
		return "0s"
	case d%day == 0:
		return fmt.Sprintf("%dd", d/day)
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

// connectCurrent is connect for the commands that read the catalog: the
// schema must be at this build's version, so that a schema not yet
// migrated gets one clear message rather than a missing table.
func (a *app) connectCurrent(ctx context.Context) (*config.Config, *daemon.DB, error) {
	c, b, err := a.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := checkSchema(ctx, c, b); err != nil {
		b.Close()
		return nil, nil, err
	}
	return c, b, nil
}

func checkSchema(ctx context.Context, c *config.Config, b *daemon.DB) error {
	res, err := b.Migrate(ctx, mensageria.MigrateCheck, c.App)
	if errors.Is(err, mensageria.ErrSchemaBehind) {
		return daemon.SchemaBehind(c.Schema, res, "run 'mensageria migrate up' with the config of the app that owns the migrations")
	}
	if err != nil {
		return fmt.Errorf("schema check: %w", err)
	}
	return nil
}

// lookupOwner finds one entry of the catalog.
func lookupOwner(ctx context.Context, op *ops.Ops, kind mensageria.ResourceKind, name string) (mensageria.Ownership, bool, error) {
	o, err := op.Owner(ctx, kind, name)
	var nf *ops.NotFoundError
	switch {
	case errors.As(err, &nf):
		return mensageria.Ownership{}, false, nil
	case err != nil:
		return mensageria.Ownership{}, false, err
	}
	return o, true, nil
}

func (a *app) ownersCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "owners",
		Short: "List and move what each app owns: message types, inbox consumers, Kafka transactional ids, migrations",
		Long: `owners operates the ownership catalog in the schema: which app owns each
message type (only it may enqueue the type, only its relay delivers it),
each inbox consumer (only its relay purges the consumer's records, after
the consumer's own window), each Kafka transactional id, and the schema's
migrations. Relays record what they own when they start; a relay whose
config claims what another app owns refuses to start.

  owners list [--all-apps]                       this app's entries (or every app's)
  owners register                                record the config's types for its app,
                                                 without running a relay
  owners transfer KIND NAME --from APP --to APP  move one entry to another app
  owners release KIND NAME --from APP            delete one entry (its type can no
                                                 longer be enqueued until an app
                                                 registers it)

KIND is type, consumer, kafka_transactional_id or migrations (whose NAME is
schema). transfer and release change the entry only while --from still owns
it (--from '' for an entry left unclaimed by the upgrade). A wrong --from or
a missing entry is exit 2 and changes nothing.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return daemon.Usage("owners needs a sub-command: list, register, transfer or release (see 'mensageria owners --help')")
		},
	}
	cmd.AddCommand(a.ownersListCommand(), a.ownersRegisterCommand(), a.ownersTransferCommand(false), a.ownersTransferCommand(true))
	return cmd
}

func (a *app) ownersListCommand() *cobra.Command {
	var allApps, asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the catalog entries of the config's app (--all-apps: of every app)",
		Long: `list prints the catalog entries the config's app owns, with the entries the
upgrade left unclaimed for the types its config routes; --all-apps prints
every entry of the schema.`,
		Args: noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			c, b, err := a.connectCurrent(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			scope := ops.ForApps(c.App)
			if allApps {
				scope = ops.AllApps()
			}
			// With the entries the upgrade left unclaimed for the types
			// the config routes.
			list, err := ops.New(b.Driver, scope).Owners(cmd.Context(), c.Types()...)
			if err != nil {
				return err
			}
			if asJSON {
				out := make([]OwnerEntry, len(list))
				for i, o := range list {
					out[i] = ownerEntryOf(o)
				}
				return json.NewEncoder(a.io.Out).Encode(out)
			}
			if len(list) == 0 {
				if allApps {
					fmt.Fprintf(a.io.Out, "the catalog of schema %s is empty\n", c.Schema)
				} else {
					fmt.Fprintf(a.io.Out, "app %s owns nothing in schema %s (its relay records its types when it starts, or run 'mensageria owners register')\n", c.App, c.Schema)
				}
				return nil
			}
			writeOwners(a, list)
			if !allApps {
				var missing []string
				for _, t := range c.Types() {
					if !slices.ContainsFunc(list, func(o mensageria.Ownership) bool { return o.Kind == mensageria.ResourceType && o.Name == t }) {
						missing = append(missing, t)
					}
				}
				if len(missing) > 0 {
					fmt.Fprintf(a.io.Err, "note: routed by the config but not app %s's: %s (see 'mensageria owners list --all-apps')\n", c.App, strings.Join(missing, ", "))
				}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&allApps, "all-apps", false, "every app's entries, not only the config's app")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func writeOwners(a *app, list []mensageria.Ownership) {
	tw, rows := newTable(a.io.Out, 0)
	fmt.Fprintln(rows, "KIND\tNAME\tAPP\tWINDOW\tSINCE")
	for _, o := range list {
		window := "-"
		if o.Kind == mensageria.ResourceConsumer {
			window = "forever"
			if o.Window > 0 {
				window = humanDuration(o.Window)
			}
		}
		fmt.Fprintf(rows, "%s\t%s\t%s\t%s\t%s\n", o.Kind, o.Name, appName(o.App), window, o.Since.UTC().Format(time.RFC3339))
	}
	_ = tw.Flush()
}

func (a *app) ownersRegisterCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "register",
		Short: "Record the config's message types as its app's, without running a relay",
		Long: `register records in the catalog that the config's app owns the message types
its config routes, and nothing else: what its relay does when it starts.
It is the first deploy step for an app that enqueues by plain SQL before
its relay ever ran, since the database refuses a type that no app owns.

A type another app owns fails the whole call with exit 2 and records
nothing.`,
		Args: noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			c, b, err := a.connectCurrent(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			if c.Receive != nil {
				return a.registerConsumers(cmd.Context(), ops.New(b.Driver, ops.ForApps(c.App)), c, asJSON)
			}
			res := make([]mensageria.Resource, len(c.Routes))
			for i, r := range c.Routes {
				res[i] = mensageria.Resource{Kind: mensageria.ResourceType, Name: r.Type}
			}
			rr, err := ops.New(b.Driver, ops.ForApps(c.App)).Register(cmd.Context(), c.App, res)
			if err != nil {
				return daemon.Conflict("register its types", fmt.Errorf("register: %w", err))
			}
			var unlisted []mensageria.Ownership
			for _, o := range rr.Unlisted {
				if o.Kind == mensageria.ResourceType {
					unlisted = append(unlisted, o)
				}
			}
			if asJSON {
				ul := make([]OwnerEntry, len(unlisted))
				for i, o := range unlisted {
					ul[i] = ownerEntryOf(o)
				}
				return json.NewEncoder(a.io.Out).Encode(map[string]any{"app": c.App, "schema": c.Schema, "types": c.Types(), "unlisted": ul})
			}
			fmt.Fprintf(a.io.Out, "app %s owns %d message type(s) in schema %s: %s\n", c.App, len(res), c.Schema, strings.Join(c.Types(), ", "))
			for _, o := range unlisted {
				fmt.Fprintf(a.io.Err, "note: app %s also owns message type %q, which the config does not route: its rows stay pending; route it again, or release it with 'mensageria owners release type %s --from %s'\n",
					c.App, o.Name, shellArg(o.Name), shellArg(c.App))
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// registerConsumers is owners register with a receive daemon's config:
// it records the config's consumers, with their windows, as its app's,
// as the daemon does when it starts.
func (a *app) registerConsumers(ctx context.Context, op *ops.Ops, c *config.Config, asJSON bool) error {
	res := make([]mensageria.Resource, len(c.Receive.Consumers))
	names := make([]string, len(res))
	for i, k := range c.Receive.Consumers {
		res[i] = mensageria.Resource{Kind: mensageria.ResourceConsumer, Name: k.Name, Window: k.Window}
		names[i] = k.Name
	}
	rr, err := op.Register(ctx, c.App, res)
	if err != nil {
		return daemon.Conflict("register its consumers", fmt.Errorf("register: %w", err))
	}
	if asJSON {
		return json.NewEncoder(a.io.Out).Encode(map[string]any{"app": c.App, "schema": c.Schema, "consumers": names})
	}
	fmt.Fprintf(a.io.Out, "app %s owns %d inbox consumer(s) in schema %s: %s\n", c.App, len(res), c.Schema, visible(strings.Join(names, ", ")))
	for _, o := range rr.Unlisted {
		if o.Kind == mensageria.ResourceConsumer {
			fmt.Fprintf(a.io.Err, "note: app %s also owns inbox consumer %q, which the config does not list; release it with 'mensageria owners release consumer %s --from %s'\n",
				c.App, o.Name, shellArg(o.Name), shellArg(c.App))
		}
	}
	return nil
}

// ownersTransferCommand builds `owners transfer` and `owners release`.
func (a *app) ownersTransferCommand(release bool) *cobra.Command {
	var from, to string
	var asJSON bool
	use, short := "transfer KIND NAME --from APP --to APP", "Move one catalog entry from one app to another (compare-and-set on --from)"
	if release {
		use, short = "release KIND NAME --from APP", "Delete one catalog entry of an app (compare-and-set on --from)"
	}
	verb := strings.Fields(use)[0]
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactArgs(2),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			kind, err := parseKind(args[0])
			if err != nil {
				return err
			}
			name := args[1]
			switch {
			case name == "":
				return daemon.Usage("owners %s: NAME is empty", verb)
			case kind == mensageria.ResourceMigrations && name != mensageria.MigrationsName:
				return daemon.Usage("owners %s: the migrations entry is named %q, not %q", verb, mensageria.MigrationsName, name)
			case !cmd.Flags().Changed("from"):
				return daemon.Usage("owners %s needs --from APP: the app that owns it now ('' for an entry left unclaimed)", verb)
			case !release && to == "":
				return daemon.Usage("owners transfer needs --to APP (to delete the entry, use 'owners release')")
			case !release && to == from:
				return daemon.Usage("owners transfer: --from and --to are both %q", from)
			}
			// --to is checked as every app name is; --from only has to
			// match the entry, so that one stored under a name no path
			// accepts any more can still be moved away.
			if !release {
				if err := ops.CheckApp(to); err != nil {
					why := strings.TrimPrefix(err.Error(), ops.ErrInvalid.Error()+": ")
					return daemon.Usage("owners transfer --to: %v; nothing changed", strings.TrimPrefix(why, mensageria.ErrInvalidApp.Error()+": "))
				}
			}
			c, b, err := a.connectCurrent(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			ctx := cmd.Context()
			// The catalog's own step between apps: no app's scope.
			op := ops.New(b.Driver, ops.AllApps())
			if release {
				err = op.Release(ctx, kind, name, from)
			} else {
				err = op.Transfer(ctx, kind, name, from, to)
			}
			var nf *ops.NotFoundError
			var tce *ops.TransferConflictError
			switch {
			case errors.As(err, &nf):
				return daemon.Usage("%s is not in the ownership catalog of schema %s; nothing changed (see 'mensageria owners list --all-apps')", thing(kind, name), c.Schema)
			case errors.As(err, &tce) && !tce.Known:
				return daemon.Usage("%s is not owned by %s; nothing changed", thing(kind, name), quoteApp(from))
			case errors.As(err, &tce):
				return daemon.Usage("%s is owned by %s, not %s; nothing changed (pass --from %s if that is the app it moves from)", thing(kind, name), quoteApp(tce.Owner), quoteApp(from), shellArg(tce.Owner))
			case err != nil:
				return fmt.Errorf("owners %s: %w", verb, err)
			}
			return a.printTransfer(verb, release, kind, name, from, to, c.Schema, asJSON)
		}),
	}
	cmd.Flags().StringVar(&from, "from", "", "the app that owns it now ('' for an entry the upgrade left unclaimed)")
	if !release {
		cmd.Flags().StringVar(&to, "to", "", "the app it moves to")
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printTransfer says what owners transfer or release changed, and what
// the operator does next.
func (a *app) printTransfer(verb string, release bool, kind mensageria.ResourceKind, name, from, to, schema string, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(a.io.Out).Encode(map[string]any{"action": verb, "kind": kind, "name": name, "from": from, "to": to, "schema": schema})
	}
	if release {
		fmt.Fprintf(a.io.Out, "%s released by %s in schema %s\n", thing(kind, name), quoteApp(from), schema)
		if kind == mensageria.ResourceType {
			fmt.Fprintf(a.io.Err, "note: until an app registers it, the database refuses new rows of type %q; rows already there stay pending\n", name)
		}
		return nil
	}
	fmt.Fprintf(a.io.Out, "%s moved from %s to %s in schema %s\n", thing(kind, name), quoteApp(from), quoteApp(to), schema)
	switch kind {
	case mensageria.ResourceType:
		fmt.Fprintf(a.io.Err, "note: running relays pick the change up within one lease: app %s's relays stop claiming %q (what they had already claimed they deliver and settle), and app %s's relays that route it start claiming it; a relay of app %s that does not route it yet needs its config to, and a restart. App %s's relay now refuses to start while its config still routes it\n", appName(from), name, to, to, appName(from))
	case mensageria.ResourceMigrations:
		fmt.Fprintf(a.io.Err, "note: from now on only app %s runs 'mensageria migrate up' on schema %s\n", to, schema)
	}
	return nil
}
