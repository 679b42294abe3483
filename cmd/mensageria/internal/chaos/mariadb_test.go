package chaos

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/mysql"
	"github.com/xadm/mensageria/driver/mysql/mysqltest"
	"github.com/xadm/mensageria/driver/sqlkit"
	"github.com/xadm/mensageria/internal/testdb"
)

// TestChaosMariaDB runs the suite's schedule on a private MariaDB server:
// the same workers, faults and checks as TestChaos, the database's faults
// done the MariaDB way, and those with no meaning there skipped
// (docs/reliability.md, "On MariaDB").
func TestChaosMariaDB(t *testing.T) {
	testdb.Long(t, "fault-injection on MariaDB")
	runChaos(t, profileFromEnv(t), startMariaDB(t))
}

// The names of the database faults and their figures on MariaDB.
var mariaNames = map[string]string{
	FaultPGKill:    "mariadb-kill-connection",
	FaultPGBackend: "mariadb-connections-killed",
	FaultPGCrash:   "mariadb-kill-9",
	FaultPGRestart: "mariadb-restart",
	FaultPGConns:   "mariadb-max-connections",
	FaultPGRevoke:  "mariadb-revoke",
	FaultPGXmin:    "mariadb-purge-pin",
	figLostLeases:  "mariadb-kill-9-lost-lease-events",
	figLostEffects: "mariadb-kill-9-lost-effects",
	figHogConns:    "mariadb-max-connections-held",
	figHogRefused:  "mariadb-max-connections-refusals",
	figHogEnded:    "mariadb-max-connections-ended",
}

// figMariaPurge is what the purge pin held back: undo logs purge had to
// keep, summed.
const figMariaPurge = "mariadb-purge-pin-history-length"

// mariaSettings are a fresh server's defaults (every commit durable:
// innodb_flush_log_at_trx_commit=1) but for fewer connection slots; the
// harness connects through the extra port, which they do not bound.
var mariaSettings = map[string]string{
	"max_connections": "64",
}

// mariaBackend is the run's private MariaDB server: the driver's tables
// and the history's in database chaos, with the driver's prefix chaos_.
type mariaBackend struct {
	sqlBackend
	srv *mysqltest.Server
	// hog connects as roleHog through the main port, which
	// max_connections bounds.
	hog sqldriver.Connector
	// tables are the tables the workers' users were granted rows of.
	tables []string
}

func startMariaDB(t *testing.T) *mariaBackend {
	srv := mysqltest.PrivateServer(t, mysqltest.Config{ExtraPort: true, Settings: mariaSettings})
	t.Logf("private MariaDB server on port %d (extra port %d), log %s", srv.Port, srv.ExtraPort, srv.LogPath())
	dsn, err := mysql.DSNFromURL(srv.ExtraURLFor("root", "test"))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	stmts := []string{"CREATE DATABASE " + chaosDatabase + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"}
	for _, r := range []string{relayRole("a"), relayRole("b"), roleReceiver, roleHog} {
		stmts = append(stmts, "CREATE USER "+r+"@'%'")
	}
	for _, q := range stmts {
		if _, err := admin.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = chaosDatabase
	// A server in crash recovery accepts the TCP connection and answers
	// late; the harness retries rather than hangs.
	cfg.Timeout = 5 * time.Second
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(harnessConns)
	db.SetMaxIdleConns(harnessConns)
	t.Cleanup(func() { _ = db.Close() })
	hogCfg := gomysql.NewConfig()
	hogCfg.User, hogCfg.Net, hogCfg.Addr, hogCfg.Timeout = roleHog, "tcp", "127.0.0.1:"+strconv.Itoa(srv.Port), 5*time.Second
	hog, err := gomysql.NewConnector(hogCfg)
	if err != nil {
		t.Fatal(err)
	}
	return &mariaBackend{sqlBackend: sqlBackend{db: db}, srv: srv, hog: hog}
}

func (b *mariaBackend) kind() string { return "MariaDB" }
func (b *mariaBackend) workerURL(role string) string {
	return b.srv.URLFor(role, chaosDatabase)
}
func (b *mariaBackend) table(name string) string { return chaosSchema + "_" + name }
func (b *mariaBackend) lockShared() string       { return " LOCK IN SHARE MODE" }

// micros: the history keeps MariaDB's times as the driver does, in unix
// microseconds.
func (b *mariaBackend) micros(col string) string { return "`" + col + "`" }

// durable: innodb_flush_log_at_trx_commit=1 is the server's, not a
// session's: no relay commits asynchronously, and a kill -9 may lose no
// commit (docs/reliability.md, "On MariaDB").
func (b *mariaBackend) durable() bool { return true }

func (b *mariaBackend) faultName(kind string) string {
	if n, ok := mariaNames[kind]; ok {
		return n
	}
	return kind
}

func (b *mariaBackend) newDriver(t testing.TB) driver.Driver {
	drv, err := mysql.New(b.db, &mysql.Config{Schema: chaosSchema})
	if err != nil {
		t.Fatal(err)
	}
	return drv
}

// reset drops the pool's idle connections, which a restarted server no
// longer knows.
func (b *mariaBackend) reset() {
	b.db.SetMaxIdleConns(0)
	b.db.SetMaxIdleConns(harnessConns)
}

// setup adds the history tables, and the outbox triggers that record
// every claim and settle (chaosworker sets @chaos_name and @chaos_now on
// its sessions).
func (b *mariaBackend) setup(h *harness) {
	t := b.table
	// The time of the transaction: the clock the driver read at its start
	// and compares leases with, or else the statement's (later).
	at := "COALESCE(@chaos_now, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)))"
	clock := "IF(@chaos_now IS NULL, 'statement', 'transaction')"
	n := func(row string) string { return "CAST(CONV(RIGHT(" + row + ".message_id, 12), 16, 10) AS UNSIGNED)" }
	ddl := []string{
		`CREATE TABLE ` + t("chaos_arrivals") + ` (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, n BIGINT NOT NULL, type VARCHAR(200) NOT NULL,
			attempt INT NOT NULL, route VARCHAR(64) NOT NULL, relay VARCHAR(200) NOT NULL, ack_dropped BOOL NOT NULL) ENGINE = InnoDB`,
		`CREATE TABLE ` + t("chaos_effects") + ` (seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, n BIGINT NOT NULL, arrival_id BIGINT NOT NULL) ENGINE = InnoDB`,
		`CREATE TABLE ` + t("chaos_leases") + ` (seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, row_id BIGINT NOT NULL, n BIGINT NOT NULL,
			type VARBINARY(512) NOT NULL, kind VARCHAR(16) NOT NULL, token BIGINT NOT NULL, ` + "`until`" + ` BIGINT NOT NULL, ` + "`at`" + ` BIGINT NOT NULL,
			app_name VARCHAR(300) NOT NULL, clock VARCHAR(16) NOT NULL) ENGINE = InnoDB`,
		`CREATE TABLE ` + t("chaos_business") + ` (producer INT NOT NULL PRIMARY KEY, value BIGINT NOT NULL) ENGINE = InnoDB`,
		`CREATE TRIGGER ` + t("chaos_lease_update") + ` AFTER UPDATE ON ` + t("outbox") + ` FOR EACH ROW
		BEGIN
			DECLARE k VARCHAR(16) DEFAULT NULL;
			DECLARE tok BIGINT;
			DECLARE lu BIGINT;
			DECLARE now_us BIGINT DEFAULT ` + at + `;
			IF NEW.lease_token IS NOT NULL AND (NOT (NEW.lease_token <=> OLD.lease_token) OR NOT (NEW.lease_until <=> OLD.lease_until)) THEN
				SET k = 'claim', tok = NEW.lease_token, lu = NEW.lease_until;
			ELSEIF OLD.lease_token IS NOT NULL AND NEW.lease_token IS NULL THEN
				SET tok = OLD.lease_token, lu = OLD.lease_until;
				SET k = CASE WHEN NEW.state = 'dead' THEN 'dead' WHEN NEW.state = 'delivered' THEN 'delivered'
					WHEN NEW.attempts < OLD.attempts AND NEW.available_at > now_us THEN 'postpone'
					WHEN NEW.attempts < OLD.attempts THEN 'release' ELSE 'retry' END;
			END IF;
			IF k IS NOT NULL THEN
				INSERT INTO ` + t("chaos_leases") + ` (row_id, n, type, kind, token, ` + "`until`, `at`" + `, app_name, clock)
				VALUES (NEW.id, ` + n("NEW") + `, NEW.type, k, tok, lu, now_us, COALESCE(@chaos_name, ''), ` + clock + `);
			END IF;
		END`,
		`CREATE TRIGGER ` + t("chaos_lease_delete") + ` AFTER DELETE ON ` + t("outbox") + ` FOR EACH ROW
		BEGIN
			IF OLD.lease_token IS NOT NULL THEN
				INSERT INTO ` + t("chaos_leases") + ` (row_id, n, type, kind, token, ` + "`until`, `at`" + `, app_name, clock)
				VALUES (OLD.id, ` + n("OLD") + `, OLD.type, 'delivered', OLD.lease_token, OLD.lease_until, ` + at + `, COALESCE(@chaos_name, ''), ` + clock + `);
			END IF;
		END`,
	}
	for _, q := range ddl {
		if _, err := b.db.ExecContext(h.ctx, q); err != nil {
			h.t.Fatalf("history tables: %v\n%s", err, q)
		}
	}
	// Rows of every table, granted table by table: a database's grants
	// reach a session only at its next USE, a table's at its next
	// statement, as the revocations need.
	rows, err := b.db.QueryContext(h.ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = ? ORDER BY table_name", chaosDatabase)
	if err != nil {
		h.t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			h.t.Fatal(err)
		}
		b.tables = append(b.tables, name)
	}
	if err := rows.Err(); err != nil {
		h.t.Fatal(err)
	}
	_ = rows.Close()
	for _, tb := range b.tables {
		q := rowsGrant("GRANT", tb, relayRole("a"), relayRole("b"), roleReceiver)
		if _, err := b.db.ExecContext(h.ctx, q); err != nil {
			h.t.Fatalf("%s: %v", q, err)
		}
	}
}

// checkHistory: every lease event carries its transaction's clock, the
// one the driver's settle guard compared with. An event timed by its
// statement means chaosworker no longer sees the driver read its clock
// (clockRead): the lease check would then hold settles to a later time
// than their guard did.
func (b *mariaBackend) checkHistory(h *harness) {
	var n int
	if err := b.queryRow(h.ctx, "SELECT count(*) FROM "+b.table("chaos_leases")+" WHERE clock <> 'transaction'").Scan(&n); err != nil {
		h.t.Errorf("lease events' clock: %v", err)
		return
	}
	if n > 0 {
		h.t.Errorf("%d lease events were timed by their statement, not by their transaction's clock: does chaosworker's clockRead still match driver/mysql's clock read?", n)
	}
}

// rowsGrant is the statement that grants (or revokes) reading and writing
// the rows of table.
func rowsGrant(verb, table string, users ...string) string {
	to := " TO "
	if verb == "REVOKE" {
		to = " FROM "
	}
	names := make([]string, len(users))
	for i, u := range users {
		names[i] = u + "@'%'"
	}
	return verb + " SELECT, INSERT, UPDATE, DELETE ON " + chaosDatabase + "." + table + to + strings.Join(names, ", ")
}

// threads are the connection ids of users' sessions.
func (b *mariaBackend) threads(ctx context.Context, users ...string) ([]int64, error) {
	q, args := "SELECT id FROM information_schema.processlist WHERE user IN ("+sqlkit.Marks(len(users))+")", make([]any, len(users))
	for i, u := range users {
		args[i] = u
	}
	rows, err := b.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// kill ends users' sessions with KILL CONNECTION and returns how many it
// ended.
func (b *mariaBackend) kill(ctx context.Context, users ...string) (int, error) {
	ids, err := b.threads(ctx, users...)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		_, err := b.db.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(id, 10))
		var me *gomysql.MySQLError
		switch {
		case err == nil:
			n++
		case errors.As(err, &me) && me.Number == 1094: // gone meanwhile
		default:
			return n, err
		}
	}
	return n, nil
}

// killSessions: every session of the app's relay user (its pool, which
// the election uses too: MariaDB has no LISTEN session).
func (b *mariaBackend) killSessions(ctx context.Context, h *harness, a string) (int, error) {
	return b.kill(ctx, relayRole(a))
}

// endWorkers: every session of the relays' and the receivers' users.
func (b *mariaBackend) endWorkers(ctx context.Context, h *harness) (int, error) {
	return b.kill(ctx, relayRole("a"), relayRole("b"), roleReceiver)
}

// holdWAL: every commit is flushed before it returns; nothing to hold.
func (b *mariaBackend) holdWAL(context.Context) (func(), error) { return func() {}, nil }

// crash kills mariadbd with SIGKILL; InnoDB recovers from its redo log at
// start.
func (b *mariaBackend) crash() error { return b.srv.Kill() }

func (b *mariaBackend) start(ctx context.Context) error {
	if err := b.srv.Start(ctx); err != nil {
		return err
	}
	b.reset()
	return nil
}

// restart is a normal shutdown and a start.
func (b *mariaBackend) restart(ctx context.Context) error {
	err := b.srv.Restart(ctx)
	b.reset()
	return err
}

func (b *mariaBackend) connectHog(ctx context.Context) (func(), error) {
	c, err := b.hog.Connect(ctx)
	var me *gomysql.MySQLError
	switch {
	case errors.As(err, &me) && me.Number == 1040: // too many connections
		return nil, errNoSlot
	case err != nil:
		return nil, err
	}
	return func() { _ = c.Close() }, nil
}

// revocation: DELETE or UPDATE on the outbox; for "usage", the rows of
// every table (a database's grants reach a session only at its next USE).
func (b *mariaBackend) revocation(r, a string) (take, give []string) {
	user := relayRole(a) + "@'%'"
	outbox := chaosDatabase + "." + b.table("outbox")
	switch r {
	case "delete":
		return []string{"REVOKE DELETE ON " + outbox + " FROM " + user}, []string{"GRANT DELETE ON " + outbox + " TO " + user}
	case "update":
		return []string{"REVOKE UPDATE ON " + outbox + " FROM " + user}, []string{"GRANT UPDATE ON " + outbox + " TO " + user}
	}
	for _, tb := range b.tables {
		take = append(take, rowsGrant("REVOKE", tb, relayRole(a)))
		give = append(give, rowsGrant("GRANT", tb, relayRole(a)))
	}
	return take, give
}

var historyLen = regexp.MustCompile(`History list length (\d+)`)

// historyLength is how many transactions' undo logs InnoDB's purge has
// still to remove.
func (b *mariaBackend) historyLength(ctx context.Context) int64 {
	var typ, name, status string
	if err := b.db.QueryRowContext(ctx, "SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status); err != nil {
		return -1
	}
	m := historyLen.FindStringSubmatch(status)
	if m == nil {
		return -1
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// pinHorizon holds a consistent snapshot for the hold, MariaDB's pinned
// horizon: InnoDB's purge may remove no undo log written since, so the
// history list grows and the relays' locking reads of the outbox walk
// ever longer version chains of its hot rows.
func (b *mariaBackend) pinHorizon(ctx context.Context, h *harness) {
	_, hold := h.p.dbHolds()
	conn, err := b.db.Conn(h.ctx)
	if err != nil {
		h.t.Errorf("pin the purge: %v", err)
		return
	}
	defer conn.Close()
	if _, err := conn.ExecContext(h.ctx, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		h.t.Errorf("pin the purge: %v", err)
		return
	}
	if _, err := conn.ExecContext(h.ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT"); err != nil {
		h.t.Errorf("pin the purge: %v", err)
		return
	}
	var rows int64
	if err := conn.QueryRowContext(h.ctx, "SELECT count(*) FROM "+b.table("outbox")).Scan(&rows); err != nil {
		h.t.Errorf("pin the purge: %v", err)
	}
	before := b.historyLength(h.ctx)
	h.logf("nemesis: a transaction holds a snapshot (purge pinned) for %s; history list length %d", hold, before)
	sleepCtx(ctx, hold)
	after := b.historyLength(h.ctx)
	if _, err := conn.ExecContext(h.ctx, "COMMIT"); err != nil {
		h.t.Errorf("end the pinning transaction: %v", err)
	}
	h.fault(figMariaPurge, int(max(after, 0)))
	h.logf("nemesis: purge released, history list length %d", after)
}
