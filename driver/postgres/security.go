package postgres

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// Role is one of the least-privilege roles of docs/security.md: what a
// process of one kind needs in the schema, and nothing else.
type Role string

// The roles, each the file security/<role>.sql.
const (
	RoleRelay    Role = "relay"    // `mensageria relay`, or a Go app's Client.Start
	RoleReceive  Role = "receive"  // `mensageria receive`
	RoleConsole  Role = "console"  // `mensageria console`
	RoleProducer Role = "producer" // an INSERT into the outbox from any language, or Enqueue
	RoleApplier  Role = "applier"  // an app applying its inbox queue by SQL (inbox_claim …)
)

// Roles lists every Role.
var Roles = []Role{RoleRelay, RoleReceive, RoleConsole, RoleProducer, RoleApplier}

// roleName is what GrantSQL accepts as a database role: written without
// quotes, it is the name the server stores, and app_roles holds it as is.
var roleName = regexp.MustCompile(`^[a-z_][a-z0-9_$]{0,62}$`)

// GrantSQL returns the statements that grant the database role dbRole what
// a process of kind role acting for app needs in the driver's schema
// (security/<role>.sql, after security/app_roles.sql), and map dbRole to
// app in app_roles for the row-level security of RowLevelSecuritySQL. The
// schema's owner runs them, after the migrations; the role must exist.
func (d *Driver) GrantSQL(role Role, dbRole, app string) (string, error) {
	found := false
	for _, r := range Roles {
		found = found || r == role
	}
	if !found {
		return "", fmt.Errorf("mensageria/postgres: no role %q (want relay, receive, console, producer or applier)", role)
	}
	if !roleName.MatchString(dbRole) {
		return "", fmt.Errorf("mensageria/postgres: database role %q must be a lower-case SQL identifier (a-z, 0-9, _, $)", dbRole)
	}
	if app == "" || app == "*" || strings.ContainsFunc(app, unicode.IsControl) {
		return "", fmt.Errorf("mensageria/postgres: the %s role of which app? (got %q)", role, app)
	}
	body, err := d.securityFile(string(role))
	if err != nil {
		return "", err
	}
	// The app is a string literal in the mapping's INSERT.
	body = strings.NewReplacer("{{role}}", dbRole, "'{{app}}'", "'"+strings.ReplaceAll(app, "'", "''")+"'", "{{app}}", app).Replace(body)
	pre, err := d.securityFile("app_roles")
	if err != nil {
		return "", err
	}
	return pre + "\n" + body, nil
}

// RowLevelSecuritySQL returns the statements that confine every role of
// app_roles to its apps' rows (security/row_level_security.sql, after
// security/app_roles.sql). The schema's owner runs them, after the
// migrations and after each upgrade; running them twice changes nothing.
func (d *Driver) RowLevelSecuritySQL() (string, error) {
	pre, err := d.securityFile("app_roles")
	if err != nil {
		return "", err
	}
	body, err := d.securityFile("row_level_security")
	if err != nil {
		return "", err
	}
	return pre + "\n" + body, nil
}

func (d *Driver) securityFile(name string) (string, error) {
	b, err := files.ReadFile("security/" + name + ".sql")
	if err != nil {
		return "", fmt.Errorf("mensageria/postgres: %w", err)
	}
	return d.expand(string(b)), nil
}
