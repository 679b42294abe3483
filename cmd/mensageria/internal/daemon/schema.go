package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/xadm/mensageria/driver"
)

// SchemaBehind is the refusal of a command that needs the schema at this
// build's version (res from a MigrateCheck that found it behind), with
// what to do about it (remedy).
func SchemaBehind(schema string, res driver.MigrateResult, remedy string) error {
	return Fail("schema %s is at version %d, this build needs %d: %s", schema, res.From, res.Latest, remedy)
}

// CheckSchema verifies at a daemon's start that the schema is at this
// build's version or, with migrate, brings it up on behalf of app, and
// logs what it applied. A schema behind is SchemaBehind's failure naming
// remedy; migrations another app owns are a *ConflictError; any other
// error is wrapped.
func CheckSchema(ctx context.Context, b *DB, schema, app string, migrate bool, remedy string, log *slog.Logger) error {
	mode := driver.MigrateCheck
	if migrate {
		mode = driver.MigrateUp
	}
	res, err := b.Migrate(ctx, mode, app)
	switch {
	case errors.Is(err, driver.ErrSchemaBehind):
		return SchemaBehind(schema, res, remedy)
	case err != nil:
		return Conflict("migrate the schema up (--migrate)", fmt.Errorf("schema check: %w", err))
	}
	if len(res.Applied) > 0 {
		log.Info("schema migrated", "schema", schema, "from", res.From, "to", res.To, "migrations_owner", res.Owner)
	}
	return nil
}
