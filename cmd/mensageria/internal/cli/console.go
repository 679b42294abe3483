package cli

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/cmd/mensageria/internal/console"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/ops"
)

// defaultConsoleListen is where the console listens unless the config's
// console.listen or --listen says otherwise: the loopback, so that a
// console is never exposed by default.
const defaultConsoleListen = "127.0.0.1:9470"

const consoleLong = `console serves the operator's web console (docs/config.md#the-web-console)
for the config's database and schema, every app of it: per message type the
owning app, pending, in flight, dead, the oldest pending age, deliveries per
minute over the last hour and the route's health as its relay recorded it;
each app's election holder; the dead letters of a type with their reason and
payload, and retry or discard of one, of those selected, or of every dead
letter of a type, each confirmed.

It needs the config's console: block, with a token: or a user: and
password: (${ENV} expanded) that everything it shows is behind. Every
action carries the session's CSRF token; read_only: true (or --read-only)
refuses every action. It shows every app of the schema, and, as the dead
commands, retries and discards only the config's app's dead letters
unless all_apps: true (or --all-apps). It runs until SIGTERM or SIGINT.

The per-type counts read every pending row, so the console keeps the last
ones and counts again in the background at most once a second (longer when
a count takes long): a page load never waits for a count.`

// consoleOptions are the console command's flags.
type consoleOptions struct {
	listen, logFormat, logLevel string
	readOnly, allApps           bool
}

func (a *app) consoleCommand() *cobra.Command {
	var o consoleOptions
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console: per type counts, route health, elections, dead letters with retry and discard",
		Long:  consoleLong,
		Args:  noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			return a.runConsole(cmd, o)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "", "address to serve on (default: the config's console.listen, else "+defaultConsoleListen+")")
	f.BoolVar(&o.readOnly, "read-only", false, "refuse every action, whatever the config says")
	f.BoolVar(&o.allApps, "all-apps", false, "retry and discard every app's dead letters, not only the config's app's (the config's console.all_apps)")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}

// runConsole serves the console until ctx ends or its server fails.
func (a *app) runConsole(cmd *cobra.Command, o consoleOptions) error {
	log, err := daemon.NewLogger(a.io.Err, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	c, err := a.loadConfig()
	if err != nil {
		return err
	}
	if c.Console == nil {
		return &config.ConfigError{File: c.File, Msg: "console: block missing: 'mensageria console' needs at least console: {token: ${MENSAGERIA_CONSOLE_TOKEN}} (docs/config.md#the-web-console)"}
	}
	cc := c.Console
	addr := o.listen
	if addr == "" {
		addr = cc.Listen
	}
	if addr == "" {
		addr = defaultConsoleListen
	}
	ctx := cmd.Context()
	b, err := daemon.OpenPinged(ctx, c.Database, c.Schema, true)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := daemon.CheckSchema(ctx, b, c.Schema, c.App, false, "run 'mensageria migrate up'", log); err != nil {
		return err
	}
	var apps []string // every app's
	if !cc.AllApps && !o.allApps {
		apps = []string{c.App}
	}
	con, err := console.New(console.Options{
		Apps:         apps,
		Ops:          ops.New(b.Driver, ops.AllApps()),
		Auth:         console.Auth{Token: cc.Token.Reveal(), User: cc.User, Password: cc.Password.Reveal()},
		ReadOnly:     cc.ReadOnly || o.readOnly,
		SecureCookie: cc.SecureCookie,
		Logger:       log,
	})
	if err != nil {
		return daemon.Usage("console: %v", err)
	}
	defer con.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return daemon.Usage("console listen %s: %v", addr, err)
	}
	srv := &http.Server{Handler: con, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	actsFor := c.App
	if apps == nil {
		actsFor = "every app"
	}
	log.Info("console serving", "addr", ln.Addr().String(), "schema", c.Schema, "read_only", cc.ReadOnly || o.readOnly, "acts_for", actsFor)
	select {
	case <-ctx.Done():
	case err := <-done:
		return fmt.Errorf("console server: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	log.Info("console stopped")
	return nil
}
