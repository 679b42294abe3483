package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Statements splits a script of MigrationSQL into its statements, as the
// mysql client does: each ends with the delimiter at the end of a line,
// ";" unless a DELIMITER line changed it (around a trigger's body, whose
// own statements end with ";"). Lines of "--" comments outside a
// statement are dropped. The server runs one statement at a time unless
// the connection allows multiStatements, which the driver leaves off.
func Statements(script string) []string {
	var out []string
	var cur strings.Builder
	delim := ";"
	for _, line := range strings.Split(script, "\n") {
		t := strings.TrimSpace(line)
		if cur.Len() == 0 && (t == "" || strings.HasPrefix(t, "--")) {
			continue
		}
		if len(t) > 10 && strings.EqualFold(t[:10], "DELIMITER ") {
			delim = strings.TrimSpace(t[10:])
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if !strings.HasPrefix(t, "--") && strings.HasSuffix(t, delim) {
			s := strings.TrimSpace(cur.String())
			out = append(out, strings.TrimSpace(strings.TrimSuffix(s, delim)))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// ExecScript runs a script of MigrationSQL statement by statement on one
// connection, stopping at the first error. MySQL commits each DDL
// statement on its own, so a script that fails halfway leaves what ran
// before; the migrations are written to run again from the top.
func ExecScript(ctx context.Context, db *sql.DB, script string) error {
	c, err := db.Conn(ctx)
	if err != nil {
		return wrap("script", err)
	}
	defer c.Close()
	return execScript(ctx, c, script)
}

func execScript(ctx context.Context, c *sql.Conn, script string) error {
	for _, s := range Statements(script) {
		if _, err := c.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%w\n  in: %s", err, firstLine(s))
		}
	}
	return nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
