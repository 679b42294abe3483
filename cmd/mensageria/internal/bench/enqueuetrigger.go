package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/xadm/mensageria/driver/postgres"
)

// The parts of the outbox's enqueue trigger (PostgreSQL migration 10) that a
// benchmark can take out to measure what each one costs: "rules" (the
// owner, key, type and headers checks) and "wake-up" (the debounced
// notification to the relay).
const (
	triggerRules  = "rules"
	triggerWakeup = "wake-up"
)

// enqueueTriggerMigration is the migration that last wrote the whole
// enqueue trigger, function and WHEN, from its DROP TRIGGER to its end.
const enqueueTriggerMigration = 10

// enqueueTriggerWithout returns the SQL that replaces, in d's schema, the
// outbox's enqueue trigger by the same trigger with the marked blocks of
// parts taken out ("-- <part> begin" to "-- <part> end", in the function
// and in the WHEN). It is cut from the migration's own text, so that a
// benchmark's "without" is the shipped trigger minus exactly that part,
// never a copy that could drift from it.
func enqueueTriggerWithout(d *postgres.Driver, schema string, parts ...string) (string, error) {
	migrations, err := d.MigrationSQL(enqueueTriggerMigration - 1)
	if err != nil {
		return "", err
	}
	var text string
	for _, m := range migrations {
		if m.Version == enqueueTriggerMigration {
			text = m.SQL
		}
	}
	start := strings.Index(text, "DROP TRIGGER outbox_enqueue ON "+schema+".outbox;")
	end := strings.LastIndex(text, "EXECUTE FUNCTION "+schema+".outbox_enqueue();")
	if start < 0 || end < start || !strings.Contains(text, "CREATE OR REPLACE FUNCTION "+schema+".outbox_enqueue()") {
		return "", fmt.Errorf("bench: migration %d of schema %s has no outbox_enqueue function and trigger where expected", enqueueTriggerMigration, schema)
	}
	end += len("EXECUTE FUNCTION " + schema + ".outbox_enqueue();")
	body := text[start:end]
	for _, part := range parts {
		var kept []string
		inside, found := false, false
		for _, line := range strings.Split(body, "\n") {
			switch strings.TrimSpace(line) {
			case "-- " + part + " begin":
				inside, found = true, true
				continue
			case "-- " + part + " end":
				inside = false
				continue
			}
			if !inside {
				kept = append(kept, line)
			}
		}
		if !found || inside {
			return "", fmt.Errorf("bench: migration %d's enqueue trigger has no complete %q block", enqueueTriggerMigration, part)
		}
		body = strings.Join(kept, "\n")
	}
	return body, nil
}

// installEnqueueTriggerWithout replaces e's enqueue trigger by the shipped
// one without parts.
func installEnqueueTriggerWithout(ctx context.Context, e Env, d *postgres.Driver, parts ...string) error {
	sql, err := enqueueTriggerWithout(d, e.Schema, parts...)
	if err != nil {
		return err
	}
	if err := e.exec(ctx, sql); err != nil {
		return fmt.Errorf("bench: install the enqueue trigger without %v in %s: %w", parts, e.Schema, err)
	}
	return nil
}
