package cli

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/cmd/mensageria/internal/demo"
)

func (a *app) demoCommand() *cobra.Command {
	var o demo.Options
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Watch two apps exchange messages under injected faults, with nothing lost and nothing applied twice",
		Long: `demo needs no config and no set-up. On embedded SQLite in a temporary
directory, two apps exchange a few thousand messages over real HTTP on
loopback while faults are injected:

  - a relay is killed mid-batch (its database connections cut, its leases
    left behind) and a new one started; the leader of the other app is
    killed too and its standby takes over;
  - the receivers answer 5xx, time out, and lose acks (apply, then drop
    the response);
  - two relays of one app run overlapping cycles (election none);
  - rows of a third app's type sit in the shared table, and a fourth app
    whose config routes that type tries to start its relay;
  - an enqueue of a type with no sender is attempted.

It ends with a table (sent, delivered, redeliveries, duplicates absorbed,
dead with reasons, lost, duplicate effects, foreign rows untouched, the
refusals) and exits 1 if anything was lost or applied twice, or a refusal
did not happen.

--db postgres://... runs the same on PostgreSQL, in a schema of its own
that is dropped afterwards.`,
		Args: noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if o.Messages < 50 || o.Messages > 200000 {
				return daemon.Usage("--messages must be 50..200000")
			}
			o.Out, o.TTY = a.io.Out, isTerminal(a.io.Out)
			rep, err := demo.Run(cmd.Context(), o)
			if err != nil {
				return err
			}
			rep.Print(a.io.Out)
			if !rep.OK() {
				return silentExit(ExitFailure)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.DB, "db", "", "run on this PostgreSQL (postgres://...) or MariaDB/MySQL (mysql://...) instead of embedded SQLite")
	f.IntVar(&o.Messages, "messages", 2000, "orders to create")
	f.DurationVar(&o.Timeout, "timeout", 90*time.Second, "give up after this long")
	f.BoolVar(&o.Keep, "keep", false, "keep the database afterwards (SQLite file, PostgreSQL schema or MySQL database)")
	f.Uint64Var(&o.Seed, "seed", 0, "fault injection seed (default random)")
	_ = f.MarkHidden("seed")
	return cmd
}
