package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/ops"
)

const routesLong = `routes pauses and resumes the delivery of a message type on purpose
(docs/adr/0032-route-pause.md): while a type is paused, no relay of its
owning app claims its messages, which stay pending with their order and
attempts; an intended pause never makes a relay unready. Running relays
stop claiming within a third of their lease (the messages they had
already claimed are delivered); a relay that starts honours the pause
before its first claim. Only the type's owning app (the config's app, or
any with --all-apps) pauses or resumes it; every pause is recorded with
who (--by, default the OS user@host) and why (--reason, required), and
shown by 'routes list', 'status', /metrics and the console.`

func (a *app) routesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "routes",
		Short: "Pause and resume the delivery of a message type on purpose",
		Long:  routesLong,
	}
	cmd.AddCommand(a.routesPauseCommand(), a.routesResumeCommand(), a.routesListCommand())
	return cmd
}

func (a *app) routesPauseCommand() *cobra.Command {
	var reason, by string
	var asJSON, allApps bool
	cmd := &cobra.Command{
		Use:   "pause TYPE --reason WHY",
		Short: "Stop every relay of the type's app from claiming it until resumed",
		Args:  exactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if by == "" {
				by = operator()
			}
			if err := ops.CheckPause(args[0], by, reason); err != nil {
				return daemon.Usage("%v (see 'mensageria routes pause --help')", err)
			}
			ctx := cmd.Context()
			_, b, op, err := a.connectInScope(ctx, allApps)
			if err != nil {
				return err
			}
			defer b.Close()
			p, err := op.PauseRoute(ctx, args[0], by, reason)
			if err != nil {
				return routeRefusal(err, args[0])
			}
			if asJSON {
				return json.NewEncoder(a.io.Out).Encode(pauseJSON(p))
			}
			fmt.Fprintf(visibleWriter{a.io.Out}, "paused %s (app %s) by %s since %s: %s\n", p.Type, p.App, p.PausedBy, p.PausedAt.UTC().Format(time.RFC3339), p.Reason)
			fmt.Fprintln(a.io.Out, "its relays stop claiming it within a third of their lease; its messages stay pending ('mensageria routes resume' lifts it)")
			return nil
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (required): the maintenance window, a ticket")
	cmd.Flags().StringVar(&by, "by", "", "who pauses (default: the OS user@host)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&allApps, "all-apps", false, "pause a type of any app (for a DBA)")
	return cmd
}

func (a *app) routesResumeCommand() *cobra.Command {
	var asJSON, allApps bool
	cmd := &cobra.Command{
		Use:   "resume TYPE",
		Short: "Let the relays of a paused type's app claim it again",
		Args:  exactArgs(1),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			_, b, op, err := a.connectInScope(ctx, allApps)
			if err != nil {
				return err
			}
			defer b.Close()
			p, err := op.ResumeRoute(ctx, args[0])
			if err != nil {
				return routeRefusal(err, args[0])
			}
			if asJSON {
				return json.NewEncoder(a.io.Out).Encode(pauseJSON(p))
			}
			fmt.Fprintf(visibleWriter{a.io.Out}, "resumed %s (app %s), paused by %s since %s; its relays claim it again within a third of their lease\n",
				p.Type, p.App, p.PausedBy, p.PausedAt.UTC().Format(time.RFC3339))
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&allApps, "all-apps", false, "resume a type of any app (for a DBA)")
	return cmd
}

func (a *app) routesListCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the types paused by an operator, every app's",
		Args:  noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			_, b, op, err := a.connectInScope(ctx, true)
			if err != nil {
				return err
			}
			defer b.Close()
			list, err := op.RoutePauses(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				out := make([]pausedJSON, 0, len(list))
				for _, p := range list {
					out = append(out, pauseJSON(p))
				}
				return json.NewEncoder(a.io.Out).Encode(out)
			}
			if len(list) == 0 {
				fmt.Fprintln(a.io.Out, "no type is paused")
				return nil
			}
			tw, rows := newTable(a.io.Out, 0)
			fmt.Fprintln(tw, "TYPE\tAPP\tPAUSED BY\tSINCE\tREASON")
			for _, p := range list {
				fmt.Fprintf(rows, "%s\t%s\t%s\t%s\t%s\n", p.Type, p.App, p.PausedBy, p.PausedAt.UTC().Format(time.RFC3339), p.Reason)
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// pausedJSON is a pause as the commands print it with --json.
type pausedJSON struct {
	Type     string    `json:"type"`
	App      string    `json:"app"`
	PausedBy string    `json:"paused_by"`
	Reason   string    `json:"reason"`
	PausedAt time.Time `json:"paused_at"`
}

func pauseJSON(p ops.RoutePause) pausedJSON {
	return pausedJSON{Type: p.Type, App: p.App, PausedBy: p.PausedBy, Reason: p.Reason, PausedAt: p.PausedAt.UTC()}
}

// routeRefusal words ops' refusals of a pause or resume as the command's
// usage errors (exit 2); a type not paused or unknown exits 1.
func routeRefusal(err error, typ string) error {
	var oos *ops.OutOfScopeError
	var np *ops.NotPausedError
	var pe *ops.PauseRouteError
	switch {
	case errors.As(err, &oos):
		owner := "no app owns it"
		if oos.Owner != "" {
			owner = "it is owned by app " + oos.Owner
		}
		return daemon.Usage("message type %q is not app %v's (%s): nothing changed (use the owning app's config, or --all-apps)", typ, strings.Join(oos.Apps, ", "), owner)
	case errors.As(err, &pe):
		return daemon.Usage("%v (see 'mensageria routes pause --help')", err)
	case errors.As(err, &np):
		return daemon.Fail("message type %q is not paused; nothing changed ('mensageria routes list' shows the paused ones)", typ)
	case errors.Is(err, ops.ErrNotFound):
		return daemon.Fail("message type %q is not in the ownership catalog: no app owns it, so there is nothing to pause", typ)
	case errors.Is(err, ops.ErrNoRoutePause):
		return daemon.Fail("this database's driver records no route pauses")
	}
	return err
}
