package daemon

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// PrivilegeError is a statement PostgreSQL refused for want of a grant
// (SQLSTATE 42501), told as what the config's database role lacks: the
// privilege and the object, for the command that needed it. The server
// names the object but not the privilege.
type PrivilegeError struct {
	Command   string // "dead retry"
	Privilege string // "UPDATE", "USAGE", ...
	Object    string // "table mensageria.outbox"
	Err       error  // the server's error
}

func (e *PrivilegeError) Error() string {
	return fmt.Sprintf("permission denied: the config's database role needs %s on %s for '%s' (grant it, or use a role that has it; the server said: %v)",
		e.Privilege, e.Object, e.Command, e.Err)
}

func (e *PrivilegeError) Unwrap() error { return e.Err }

// deniedFor reads the object out of the server's message: "permission
// denied for table outbox", "… for schema mensageria", "must be owner of
// table outbox".
var deniedFor = regexp.MustCompile(`(?:permission denied for|must be owner of) (table|relation|view|schema|sequence|function|procedure) "?([^"\s]+)"?`)

// PrivilegeOf turns a refusal for want of a grant met by command (its
// path under the program, e.g. "dead retry") in schema into a
// *PrivilegeError; any other error is nil.
func PrivilegeOf(err error, command, schema string) *PrivilegeError {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != "42501" {
		return nil
	}
	m := deniedFor.FindStringSubmatch(pg.Message)
	if m == nil {
		// Row-level security and the like: nothing more to name than
		// the server does.
		return &PrivilegeError{Command: command, Privilege: "a privilege", Object: "an object of schema " + schema, Err: pg}
	}
	kind, name := m[1], m[2]
	if kind == "relation" || kind == "view" {
		kind = "table"
	}
	object := kind + " " + name
	if kind != "schema" && !strings.Contains(name, ".") && schema != "" {
		object = kind + " " + schema + "." + name
	}
	if strings.HasPrefix(pg.Message, "must be owner") {
		return &PrivilegeError{Command: command, Privilege: "ownership", Object: object, Err: pg}
	}
	return &PrivilegeError{Command: command, Privilege: privilegeNeeded(command, kind, name), Object: object, Err: pg}
}

// privilegeNeeded is what command does to an object of kind: what the
// role it runs as must be granted.
func privilegeNeeded(command, kind, name string) string {
	switch kind {
	case "schema":
		if command == "migrate up" {
			return "CREATE and USAGE"
		}
		return "USAGE"
	case "sequence":
		return "USAGE"
	case "function", "procedure":
		return "EXECUTE"
	}
	switch command {
	case "dead retry":
		if name == "outbox" {
			return "UPDATE"
		}
	case "dead discard":
		if name == "outbox" {
			return "DELETE"
		}
	case "doubt resolve":
		switch name {
		case "outbox":
			return "UPDATE and DELETE"
		case "resolutions", "delivered_counts_log":
			return "INSERT"
		}
	case "owners register":
		if name == "owners" {
			return "INSERT and UPDATE"
		}
	case "owners transfer":
		if name == "owners" {
			return "UPDATE"
		}
	case "owners release":
		if name == "owners" {
			return "DELETE"
		}
	case "enqueue":
		if name == "outbox" {
			return "INSERT"
		}
	case "migrate up":
		return "ownership (the migrations alter it)"
	}
	return "SELECT"
}
