// Package cli is the mensageria command: every sub-command, testable with
// buffers in place of the terminal. cmd/mensageria is a thin main over Run.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/redact"
)

// Exit codes; the failures' are daemon's, which every *daemon.Error carries.
const (
	ExitOK      = 0
	ExitFailure = daemon.ExitFailure // a runtime failure: database down, delivery failed, ...
	ExitUsage   = daemon.ExitUsage   // bad flags, bad config, a type with no route
)

// IO is where a command reads and writes, and how it sees its environment.
type IO struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
	// Env looks a variable up; nil means os.LookupEnv.
	Env func(string) (string, bool)
}

// silentExit ends with code without printing anything more: the command
// already told the user why.
type silentExit int

func (s silentExit) Error() string { return fmt.Sprintf("exit %d", int(s)) }

// Run executes the command line args (without the program name) and
// returns the process exit code.
func Run(ctx context.Context, args []string, stdio IO) int {
	if stdio.In == nil {
		stdio.In = strings.NewReader("")
	}
	if stdio.Out == nil {
		stdio.Out = io.Discard
	}
	if stdio.Err == nil {
		stdio.Err = io.Discard
	}
	if stdio.Env == nil {
		stdio.Env = os.LookupEnv
	}
	a := &app{io: stdio}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdio.In)
	root.SetOut(stdio.Out)
	root.SetErr(stdio.Err)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	// A catalog conflict is worded here once, with the way out, whichever
	// command met it.
	var conflict *daemon.ConflictError
	if errors.As(err, &conflict) {
		err = conflictErr(conflict.Err, conflict.What, a.configPath)
	}
	if cmd != nil {
		if pe := daemon.PrivilegeOf(err, strings.TrimPrefix(cmd.CommandPath(), root.Name()+" "), a.schema); pe != nil {
			err = &daemon.Error{Code: daemon.ExitFailure, Err: pe}
		}
	}
	var s silentExit
	if errors.As(err, &s) {
		return int(s)
	}
	code := ExitUsage // errors cobra raises itself: flags, args, unknown command
	var de *daemon.Error
	var ce *config.ConfigError
	var me config.MultiError
	switch {
	case errors.As(err, &de):
		code = de.Code
	case errors.As(err, &ce), errors.As(err, &me):
		code = ExitUsage
	}
	fmt.Fprintln(stdio.Err, "mensageria: "+visible(redact.Text(err.Error())))
	if code == ExitUsage && de == nil && ce == nil && me == nil {
		fmt.Fprintln(stdio.Err, "Run 'mensageria --help' for usage.")
	}
	return code
}

// app holds what the sub-commands share.
type app struct {
	io         IO
	configPath string
	schema     string // the loaded config's, to name objects in errors
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "mensageria",
		Short: "Guaranteed machine-to-machine delivery: outbox, relay, idempotent inbox",
		Long: `mensageria runs the relay of a transactional outbox beside apps written in
any language, and operates its queues.

Start with the demo, which needs no set-up:

  mensageria demo

Every other command reads a YAML config (--config, default mensageria.yaml,
or $MENSAGERIA_CONFIG); 'mensageria explain' shows what it guarantees.

Exit codes: 0 ok, 1 runtime failure, 2 usage or config error (or a message
type with no route, or a type, consumer or id another app owns).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	def := "mensageria.yaml"
	if v, ok := a.io.Env("MENSAGERIA_CONFIG"); ok && v != "" {
		def = v
	}
	root.PersistentFlags().StringVarP(&a.configPath, "config", "c", def, "config file (env MENSAGERIA_CONFIG)")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return daemon.Usage("%v (see '%s --help')", err, c.CommandPath())
	})
	root.CompletionOptions.HiddenDefaultCmd = true
	root.AddCommand(
		a.migrateCommand(),
		a.relayCommand(),
		a.receiveCommand(),
		a.enqueueCommand(),
		a.statusCommand(),
		a.consoleCommand(),
		a.deadCommand(),
		a.doubtCommand(),
		a.ownersCommand(),
		a.routesCommand(),
		a.explainCommand(),
		a.benchCommand(),
		a.demoCommand(),
		a.versionCommand(),
		a.healthcheckCommand(),
	)
	return root
}

// runE adapts a command body so that its plain errors are runtime
// failures (exit 1), while typed ones keep their code.
func runE(f func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := f(cmd, args)
		if err == nil {
			return nil
		}
		var de *daemon.Error
		var ce *config.ConfigError
		var me config.MultiError
		var s silentExit
		if errors.As(err, &de) || errors.As(err, &ce) || errors.As(err, &me) || errors.As(err, &s) {
			return err
		}
		// Another app's ownership, or a type no app owns, is a mistake of
		// configuration or of the operator, never a passing failure: a
		// retry would meet the same catalog.
		if errors.Is(err, mensageria.ErrOwnerConflict) || errors.Is(err, mensageria.ErrUnownedType) || errors.Is(err, mensageria.ErrInvalidApp) {
			return &daemon.Error{Code: daemon.ExitUsage, Err: err}
		}
		return &daemon.Error{Code: daemon.ExitFailure, Err: err}
	}
}

// readConfig reads the --config file's bytes, once for every parse of it.
func (a *app) readConfig() ([]byte, error) {
	b, err := os.ReadFile(a.configPath)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, daemon.Usage("config file %s not found (pass --config FILE or set MENSAGERIA_CONFIG; 'mensageria demo' needs none)", a.configPath)
	case err != nil:
		return nil, &config.ConfigError{File: a.configPath, Msg: err.Error()}
	}
	return b, nil
}

// loadConfig reads the --config file.
func (a *app) loadConfig() (*config.Config, error) {
	b, err := a.readConfig()
	if err != nil {
		return nil, err
	}
	return a.parseConfig(b)
}

// parseConfig parses b, the --config file's bytes, as a relay's config.
func (a *app) parseConfig(b []byte) (*config.Config, error) {
	c, err := config.ParseConfig(a.configPath, b, a.io.Env)
	if err != nil {
		if config.IsReceive(b) {
			return nil, daemon.Usage("%s is a receive daemon's config (consumers:, no routes:): this command needs a relay's config; status, migrate, owners, dead and doubt take either", a.configPath)
		}
		return nil, err
	}
	a.schema = c.Schema
	for _, w := range c.Warnings {
		fmt.Fprintln(a.io.Err, "warning: "+w)
	}
	return c, nil
}

// loadOperatorConfig reads the --config file of an operator command
// (status, migrate, owners, dead, doubt), which may be a relay's config or
// a receive daemon's: one file serves every command of a receive-only
// app. A receive config gives the database, schema and app, and no
// routes (Config.Receive holds the rest).
func (a *app) loadOperatorConfig() (*config.Config, error) {
	b, err := a.readConfig()
	if err != nil {
		return nil, err
	}
	if !config.IsReceive(b) {
		return a.parseConfig(b)
	}
	rc, err := config.ParseReceiveConfig(a.configPath, b, a.io.Env)
	if err != nil {
		return nil, err
	}
	a.schema = rc.Schema
	return config.FromReceive(a.configPath, rc), nil
}

// exactArgs is cobra.ExactArgs with a usage exit code.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return daemon.Usage("%s takes %d argument(s), got %d (see '%s --help')", cmd.Name(), n, len(args), cmd.CommandPath())
		}
		return nil
	}
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return daemon.Usage("%s takes no arguments, got %q (see '%s --help')", cmd.Name(), args, cmd.CommandPath())
	}
	return nil
}
