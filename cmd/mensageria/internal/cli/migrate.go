package cli

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
)

const migrateLong = `migrate manages the mensageria tables in the configured schema.

  migrate up      apply every missing migration (safe to run from several
                  processes at once: they serialize on a database lock).
                  The first app to migrate a schema up owns its migrations;
                  from any other app it is refused (exit 2), naming the owner
  migrate check   verify the schema is current without changing it; exits 1
                  when it is behind (open to every app)
  migrate sql     print the DDL, for a team's own migration tool (Flyway,
                  goose, Liquibase); with --grants, the least privileges of
                  one of the config's app's roles, and with
                  --row-level-security the opt-in policies that keep each
                  app's roles off the other apps' rows (docs/security.md)`

func (a *app) migrateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply, verify or print the schema migrations",
		Long:  migrateLong,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return daemon.Usage("migrate needs a sub-command: up, check or sql (see 'mensageria migrate --help')")
		},
	}
	var asJSON bool
	run := func(mode mensageria.MigrateMode) func(*cobra.Command, []string) error {
		return runE(func(cmd *cobra.Command, _ []string) error {
			return a.runMigrate(cmd, mode, asJSON)
		})
	}
	up := &cobra.Command{Use: "up", Short: "Apply every missing migration", Args: noArgs, RunE: run(mensageria.MigrateUp)}
	check := &cobra.Command{Use: "check", Short: "Verify the schema version without changing anything (exit 1 when behind)", Args: noArgs, RunE: run(mensageria.MigrateCheck)}
	for _, c := range []*cobra.Command{up, check} {
		c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	}
	sql := a.migrateSQLCommand(&asJSON)
	cmd.AddCommand(up, check, sql)
	return cmd
}

// runMigrate applies (MigrateUp) or checks (MigrateCheck) the schema and
// says where it stands; a schema behind exits 1.
func (a *app) runMigrate(cmd *cobra.Command, mode mensageria.MigrateMode, asJSON bool) error {
	connect := a.connect // check never creates a SQLite file
	if mode == mensageria.MigrateUp {
		connect = a.connectCreating
	}
	c, b, err := connect(cmd.Context())
	if err != nil {
		return err
	}
	defer b.Close()
	res, err := b.Migrate(cmd.Context(), mode, c.App)
	behind := errors.Is(err, mensageria.ErrSchemaBehind)
	if err != nil && !behind {
		return daemon.Conflict("migrate the schema up", fmt.Errorf("migrate: %w", err))
	}
	if asJSON {
		_ = json.NewEncoder(a.io.Out).Encode(map[string]any{
			"schema": c.Schema, "from": res.From, "to": res.To, "latest": res.Latest, "applied": nonNil(res.Applied), "current": !behind, "owner": res.Owner,
		})
	} else {
		switch {
		case behind:
			fmt.Fprintf(a.io.Out, "schema %s is behind: version %d, this build needs %d; run 'mensageria migrate up' (or apply 'mensageria migrate sql')\n", c.Schema, res.From, res.Latest)
		case mode == mensageria.MigrateCheck:
			fmt.Fprintf(a.io.Out, "schema %s is current (version %d)\n", c.Schema, res.To)
		case len(res.Applied) == 0:
			fmt.Fprintf(a.io.Out, "schema %s already at version %d; nothing to apply\n", c.Schema, res.To)
		default:
			fmt.Fprintf(a.io.Out, "schema %s migrated from version %d to %d (applied %v)\n", c.Schema, res.From, res.To, res.Applied)
		}
		if res.Owner != "" && !behind {
			fmt.Fprintf(a.io.Out, "its migrations are owned by app %s\n", res.Owner)
		}
	}
	if behind {
		return silentExit(ExitFailure)
	}
	return nil
}

// migrateSQLCommand is 'migrate sql'; asJSON is the flag it shares with
// up and check.
func (a *app) migrateSQLCommand(asJSON *bool) *cobra.Command {
	var from int
	var grants, role string
	var rls bool
	sql := &cobra.Command{
		Use:   "sql",
		Short: "Print the DDL of the migrations, for your own migration tool",
		Args:  noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			c, err := a.loadOperatorConfig()
			if err != nil {
				return err
			}
			b, err := daemon.Open(cmd.Context(), c.Database, c.Schema, true)
			if err != nil {
				return err
			}
			defer b.Close()
			if grants != "" || rls {
				return a.printSecuritySQL(b, c, grants, role, rls)
			}
			ms, err := b.Driver.MigrationSQL(from)
			if err != nil {
				return err
			}
			if *asJSON {
				return json.NewEncoder(a.io.Out).Encode(ms)
			}
			for _, m := range ms {
				fmt.Fprintf(a.io.Out, "-- mensageria migration %04d: %s (schema %s)\n%s\n\n", m.Version, m.Name, c.Schema, m.SQL)
			}
			return nil
		}),
	}
	sql.Flags().IntVar(&from, "from", 0, "print only the migrations after this version")
	sql.Flags().StringVar(&grants, "grants", "", "print the grants of the config's app's relay, receive, console, producer or applier role instead (PostgreSQL)")
	sql.Flags().StringVar(&role, "role", "", "the database role --grants grants to")
	sql.Flags().BoolVar(&rls, "row-level-security", false, "print the opt-in row-level security instead (PostgreSQL)")
	sql.Flags().BoolVar(asJSON, "json", false, "print JSON")
	return sql
}

// printSecuritySQL prints the SQL of docs/security.md that the schema's
// owner runs after the migrations: a role's grants, the row-level
// security, or both.
func (a *app) printSecuritySQL(b *daemon.DB, c *config.Config, grants, role string, rls bool) error {
	if !b.IsPostgres() {
		return daemon.Usage("--grants and --row-level-security are PostgreSQL's: a SQLite file has no roles (docs/security.md says how to protect it)")
	}
	if grants != "" {
		if role == "" {
			return daemon.Usage("--grants %s needs --role, the database role to grant it to", grants)
		}
		sql, err := b.GrantSQL(grants, role, c.App)
		if err != nil {
			return daemon.Usage("%v", err)
		}
		fmt.Fprintf(a.io.Out, "-- mensageria: the %s role of app %s, granted to %s (schema %s)\n%s\n", grants, c.App, role, c.Schema, sql)
	}
	if rls {
		sql, err := b.RowLevelSecuritySQL()
		if err != nil {
			return err
		}
		fmt.Fprintf(a.io.Out, "-- mensageria: row-level security (schema %s)\n%s\n", c.Schema, sql)
	}
	return nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
