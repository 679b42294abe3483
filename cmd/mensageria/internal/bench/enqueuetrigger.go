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
	// triggerOwner is the owner test alone (a type no app owns is
	// refused), without the key, type and headers tests: the part of the
	// rules that makes the enqueue check an ownership check. Migration 10
	// marks no block for it (a migration's text cannot change once
	// shipped), so cutOwnerTest takes out its two places by their text.
	triggerOwner = "owner"
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
		if part == triggerOwner {
			if body, err = cutOwnerTest(body); err != nil {
				return "", err
			}
			continue
		}
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

// cutOwnerTest takes the owner test out of the enqueue trigger's text: its
// clause in the function's one expression (two lines) and its own test
// further down (an IF of four lines). Anything but exactly those is an
// error, so a later migration that moves them fails the benchmark instead
// of measuring something else.
func cutOwnerTest(body string) (string, error) {
	lines := strings.Split(body, "\n")
	var kept []string
	var inExpr, inIf int
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		switch {
		case strings.HasPrefix(l, "AND pg_catalog.current_setting('mensageria.owned_") && i+1 < len(lines) &&
			strings.HasPrefix(strings.TrimSpace(lines[i+1]), "= coalesce(pg_catalog.pg_sequence_last_value("):
			inExpr++
			i++
		case strings.HasPrefix(l, "IF pg_catalog.current_setting('mensageria.owned_") && i+3 < len(lines) &&
			strings.HasPrefix(strings.TrimSpace(lines[i+1]), "IS DISTINCT FROM coalesce(") &&
			strings.HasPrefix(strings.TrimSpace(lines[i+2]), "PERFORM ") && strings.Contains(lines[i+2], ".outbox_owned(NEW.type)") &&
			strings.TrimSpace(lines[i+3]) == "END IF;":
			inIf++
			i += 3
		default:
			kept = append(kept, lines[i])
		}
	}
	if inExpr != 1 || inIf != 1 || strings.Contains(strings.Join(kept, "\n"), "mensageria.owned_") {
		return "", fmt.Errorf("bench: migration %d's enqueue trigger does not hold the owner test where expected (%d clauses, %d tests)", enqueueTriggerMigration, inExpr, inIf)
	}
	return strings.Join(kept, "\n"), nil
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
