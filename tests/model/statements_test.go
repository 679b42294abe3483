package model

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The repository root, relative to this package.
const root = "../.."

// The files whose statements the drivers run: a statement in one of them
// that writes the outbox or the election table is a state transition the
// model must know.
var (
	sqlGlobs = []string{
		"driver/postgres/queries/*.sql",
		"driver/postgres/migrations/*.sql",
		"driver/sqlite/queries/*.sql",
		"driver/sqlite/migrations/*.sql",
		"driver/mysql/queries/*.sql",
		"driver/mysql/migrations/*.sql",
	}
	goGlobs = []string{
		"driver/postgres/*.go",
		"driver/sqlite/*.go",
		"driver/mysql/*.go",
		"driver/sqlkit/*.go", // what the database/sql drivers share
	}
	// The tables whose rows the model follows.
	modelled = map[string]bool{"outbox": true, "leader": true}
)

// TestEveryStateChangeIsModelled fails when a driver gains (or changes the
// columns of) a statement that writes the outbox or the election, until
// docs/model/README.md maps it to a step of the model or says why it is no
// delivery state transition; and when the README maps a statement that no
// longer exists.
func TestEveryStateChangeIsModelled(t *testing.T) {
	found := statements(t)
	if len(found) < 10 {
		// The drivers have a dozen such statements; finding fewer means
		// the scan broke, not that they went away.
		t.Fatalf("found only %d statements that write the outbox or the election: %v", len(found), found)
	}
	mapped := readMapping(t)
	steps := modelSteps(t)
	var missing, stale []string
	for _, k := range found {
		if _, ok := mapped[k]; !ok {
			missing = append(missing, k)
		}
	}
	for k, step := range mapped {
		if !slices.Contains(found, k) {
			stale = append(stale, k)
			continue
		}
		if err := checkStep(step, steps); err != "" {
			t.Errorf("docs/model/README.md maps `%s` to %q: %s", k, step, err)
		}
	}
	sort.Strings(stale)
	if len(missing) > 0 {
		t.Errorf("statements that write the outbox or the election but that docs/model/README.md does not map to a model step "+
			"(add a row `| `statement` | `step` ... |`, or `not a delivery state transition: <why>`):\n| `%s` | |", strings.Join(missing, "` | |\n| `"))
	}
	if len(stale) > 0 {
		t.Errorf("docs/model/README.md maps statements the drivers no longer have (remove or update the rows):\n%s", strings.Join(stale, "\n"))
	}
}

const notModelled = "not a delivery state transition:"

// checkStep says what is wrong with a README mapping, "" for nothing.
func checkStep(step string, steps map[string]bool) string {
	if rest, ok := strings.CutPrefix(step, notModelled); ok {
		if len(strings.TrimSpace(rest)) < 10 {
			return "say why it is not one"
		}
		return ""
	}
	named := 0
	for _, m := range regexp.MustCompile("`([a-z-]+)`").FindAllStringSubmatch(step, -1) {
		if !steps[m[1]] {
			return "`" + m[1] + "` is no step of docs/model/delivery.pml"
		}
		named++
	}
	if named == 0 {
		return "name the model step (`claim`, `settle`, ...) or start with \"" + notModelled + "\""
	}
	return ""
}

// modelSteps reads the names of the model's steps ("step NAME:" in its
// comments).
func modelSteps(t *testing.T) map[string]bool {
	t.Helper()
	src, err := os.ReadFile(modelFile)
	if err != nil {
		t.Fatal(err)
	}
	steps := map[string]bool{}
	for _, m := range regexp.MustCompile(`\bstep ([a-z-]+):`).FindAllStringSubmatch(string(src), -1) {
		steps[m[1]] = true
	}
	if len(steps) < 5 {
		t.Fatalf("docs/model/delivery.pml names only %d steps: %v", len(steps), steps)
	}
	return steps
}

// readMapping reads the table rows of docs/model/README.md whose first cell
// is a statement: `path[ func]: signature`.
func readMapping(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs/model/README.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\|\\s*`(driver/[^`]+)`\\s*\\|\\s*(.*?)\\s*\\|\\s*$")
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if r := row.FindStringSubmatch(line); r != nil {
			if _, dup := m[r[1]]; dup {
				t.Errorf("docs/model/README.md maps `%s` twice", r[1])
			}
			m[r[1]] = r[2]
		}
	}
	return m
}

// statements lists the drivers' statements that write the outbox or the
// election, as "path: signature" (SQL files) or "path Func: signature"
// (statements built in Go), sorted.
func statements(t *testing.T) []string {
	t.Helper()
	set := map[string]bool{}
	for _, g := range sqlGlobs {
		files, err := filepath.Glob(filepath.Join(root, g))
		if err != nil || len(files) == 0 {
			t.Fatalf("no files match %s (%v)", g, err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(root, f)
			for _, sig := range writes(stripComments(string(b))) {
				set[filepath.ToSlash(rel)+": "+sig] = true
			}
		}
	}
	for _, g := range goGlobs {
		files, err := filepath.Glob(filepath.Join(root, g))
		if err != nil || len(files) == 0 {
			t.Fatalf("no files match %s (%v)", g, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			rel, _ := filepath.Rel(root, f)
			for _, k := range goStatements(t, f) {
				set[filepath.ToSlash(rel)+" "+k] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var reLineComment = regexp.MustCompile(`--[^\n]*`)

func stripComments(sql string) string { return reLineComment.ReplaceAllString(sql, " ") }

var (
	reWrite   = regexp.MustCompile(`(?is)\b(UPDATE|DELETE\s+FROM|INSERT\s+INTO)\s+([^\s(]+)`)
	reSet     = regexp.MustCompile(`(?is)^\s*(?:[a-z_]+\s+)??SET\s+(.*?)(?:\bWHERE\b|\bFROM\b|\bRETURNING\b|;|$)`)
	reInsCols = regexp.MustCompile(`(?is)^\s*(?:AS\s+[a-z_]+\s*)?\(([^)]*)\)`)
	reUpsert  = regexp.MustCompile(`(?is)\bDO\s+UPDATE\s+SET\s+(.*?)(?:\bWHERE\b|\bRETURNING\b|;|$)`)
	reBraces  = regexp.MustCompile(`\{+[^}]*\}+`)
)

// writes finds the statements of sql that write a modelled table, each as
// its signature: the verb, the table and the columns it sets.
func writes(sql string) []string {
	var out []string
	for _, m := range reWrite.FindAllStringSubmatchIndex(sql, -1) {
		verb := strings.ToUpper(strings.Fields(sql[m[2]:m[3]])[0])
		table := tableName(sql[m[4]:m[5]])
		if !modelled[table] {
			continue
		}
		rest := sql[m[1]:]
		if i := strings.IndexByte(rest, ';'); i >= 0 {
			rest = rest[:i]
		}
		sig := verb + " " + table
		switch verb {
		case "UPDATE":
			if s := reSet.FindStringSubmatch(rest); s != nil {
				sig += " SET " + columns(s[1], true)
			}
		case "INSERT":
			if c := reInsCols.FindStringSubmatch(rest); c != nil {
				sig += " (" + columns(c[1], false) + ")"
			}
			if u := reUpsert.FindStringSubmatch(rest); u != nil {
				sig += " ON CONFLICT SET " + columns(u[1], true)
			}
		}
		out = append(out, sig)
	}
	return out
}

// tableName is the bare name of a table reference: no schema, no prefix
// (the SQLite driver's "mensageria_"), no placeholder of a name built in Go.
func tableName(ref string) string {
	ref = reBraces.ReplaceAllString(ref, "")
	ref = strings.Trim(ref, `"`+"`")
	if i := strings.LastIndexByte(ref, '.'); i >= 0 {
		ref = ref[i+1:]
	}
	ref = strings.TrimPrefix(strings.ToLower(ref), "mensageria_")
	return ref
}

// columns lists the column names of a SET list (assignments) or of an
// INSERT column list, sorted and joined.
func columns(list string, assignments bool) string {
	var cols []string
	depth, start := 0, 0
	add := func(part string) {
		if assignments {
			part, _, _ = strings.Cut(part, "=")
		}
		// MySQL quotes a reserved column name (`key`) with backticks.
		part = strings.Trim(strings.TrimSpace(part), "`")
		if i := strings.LastIndexByte(part, '.'); i >= 0 {
			part = part[i+1:] // o.col
		}
		if part != "" && !slices.Contains(cols, part) {
			cols = append(cols, part)
		}
	}
	for i, r := range list {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				add(list[start:i])
				start = i + 1
			}
		}
	}
	add(list[start:])
	sort.Strings(cols)
	return strings.Join(cols, ", ")
}

// goStatements finds the statements built as string expressions in one Go
// file, as "Func: signature".
func goStatements(t *testing.T, path string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	scan := func(name string, body ast.Node) {
		env := localStrings(body)
		ast.Inspect(body, func(n ast.Node) bool {
			e, ok := n.(ast.Expr)
			if !ok || !isString(e) {
				return true
			}
			for _, sig := range writes(render(e, env, 0)) {
				out = append(out, name+": "+sig)
			}
			return false // its parts were rendered with it
		})
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Body != nil {
				scan(funcName(d), d.Body)
			}
		case *ast.GenDecl:
			scan("package", d)
		}
	}
	return out
}

func funcName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return d.Name.Name
	}
	typ := d.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + d.Name.Name
	}
	return d.Name.Name
}

// isString reports whether e is a string literal or a concatenation with
// one in it.
func isString(e ast.Expr) bool {
	switch x := e.(type) {
	case *ast.BasicLit:
		return x.Kind == token.STRING
	case *ast.BinaryExpr:
		return x.Op == token.ADD && (isString(x.X) || isString(x.Y))
	case *ast.ParenExpr:
		return isString(x.X)
	}
	return false
}

// localStrings maps each name a body assigns a string expression to (its
// first assignment) to that expression, so that a table name kept in a
// variable can be read back.
func localStrings(body ast.Node) map[string]ast.Expr {
	env := map[string]ast.Expr{}
	ast.Inspect(body, func(n ast.Node) bool {
		switch s := n.(type) {
		case *ast.AssignStmt:
			if len(s.Lhs) == len(s.Rhs) {
				for i, l := range s.Lhs {
					if id, ok := l.(*ast.Ident); ok && isString(s.Rhs[i]) {
						if _, seen := env[id.Name]; !seen {
							env[id.Name] = s.Rhs[i]
						}
					}
				}
			}
		case *ast.ValueSpec:
			for i, id := range s.Names {
				if i < len(s.Values) && isString(s.Values[i]) {
					if _, seen := env[id.Name]; !seen {
						env[id.Name] = s.Values[i]
					}
				}
			}
		}
		return true
	})
	return env
}

// render is the text of a string expression, with what is not a literal
// shown as {name}, except names assigned in the same function and
// d.table("name"), the PostgreSQL driver's qualified table name.
func render(e ast.Expr, env map[string]ast.Expr, depth int) string {
	switch x := e.(type) {
	case *ast.BasicLit:
		if x.Kind == token.STRING {
			if s, err := strconv.Unquote(x.Value); err == nil {
				return s
			}
		}
		return "{" + x.Value + "}"
	case *ast.BinaryExpr:
		if x.Op == token.ADD {
			return render(x.X, env, depth) + render(x.Y, env, depth)
		}
	case *ast.ParenExpr:
		return render(x.X, env, depth)
	case *ast.Ident:
		if v, ok := env[x.Name]; ok && depth < 4 {
			return render(v, env, depth+1)
		}
		return "{" + x.Name + "}"
	case *ast.CallExpr:
		if sel, ok := x.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "table" && len(x.Args) == 1 {
			if lit, ok := x.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				s, _ := strconv.Unquote(lit.Value)
				return "{schema}." + s
			}
		}
		return "{call}"
	}
	return "{expr}"
}

// TestWrites pins the reading of statements on the shapes the drivers use.
func TestWrites(t *testing.T) {
	for _, c := range []struct{ sql, want string }{
		{"UPDATE {{schema}}.outbox o\nSET attempts = o.attempts + 1,\n lease_token = $3, lease_until = now() + $4::interval\nFROM due WHERE o.id = due.id",
			"UPDATE outbox SET attempts, lease_token, lease_until"},
		{"UPDATE {{schema}}.outbox SET lease_token = NULL, attempts = greatest(attempts - 1, 0) WHERE id = ANY($1)",
			"UPDATE outbox SET attempts, lease_token"},
		{"DELETE FROM mensageria_outbox WHERE id IN (1)", "DELETE outbox"},
		{"INSERT INTO {schema}.leader AS l (app, epoch, holder, since) VALUES ($1, 1, $2, now())\n ON CONFLICT (app) DO UPDATE SET epoch = l.epoch + 1, holder = $2, since = now() RETURNING epoch",
			"INSERT leader (app, epoch, holder, since) ON CONFLICT SET epoch, holder, since"},
		{"INSERT INTO {p}outbox (message_id, type) VALUES ", "INSERT outbox (message_id, type)"},
		{"INSERT INTO {{schema}}.delivered_counts AS c (type) SELECT 1 ON CONFLICT (type) DO UPDATE SET n = 1", ""},
		{"SELECT 1 FROM {{schema}}.outbox FOR UPDATE SKIP LOCKED", ""},
		{"CREATE TRIGGER outbox_check AFTER INSERT ON {{schema}}.outbox", ""},
		{"INSERT INTO {{schema}}.outbox_identity DEFAULT VALUES;", ""},
	} {
		if got := strings.Join(writes(c.sql), "; "); got != c.want {
			t.Errorf("writes(%q) = %q, want %q", c.sql, got, c.want)
		}
	}
}

// TestGoStatements pins the reading of statements built in Go: a table name
// kept in a variable, the PostgreSQL driver's d.table, a statement passed
// to a closure, and one on another table.
func TestGoStatements(t *testing.T) {
	src := `package x

func (d *Driver) Park(ctx context.Context) {
	o := d.prefix + "outbox"
	run := func(head string) { w.ExecContext(ctx, head+" WHERE id = ?"+d.q.settled) }
	run("UPDATE " + o + " SET state = 'parked', lease_token = NULL")
	d.pool.Exec(ctx, "DELETE FROM "+d.table("leader")+" WHERE app = $1")
	d.pool.Exec(ctx, "UPDATE "+d.table("owners")+" SET app = $1")
}
`
	path := filepath.Join(t.TempDir(), "x.go")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(goStatements(t, path), "; ")
	want := "Driver.Park: UPDATE outbox SET lease_token, state; Driver.Park: DELETE leader"
	if got != want {
		t.Fatalf("goStatements = %q, want %q", got, want)
	}
}
