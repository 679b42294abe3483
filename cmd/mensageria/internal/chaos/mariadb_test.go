package chaos

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync"
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

// The names of the database faults on MariaDB, in its figures.
var mariaNames = map[string]string{
	FaultPGKill:    "mariadb-kill-connection",
	FaultPGBackend: "mariadb-connections-killed",
	FaultPGCrash:   "mariadb-kill-9",
	FaultPGRestart: "mariadb-restart",
	FaultPGConns:   "mariadb-max-connections",
	FaultPGRevoke:  "mariadb-revoke",
	FaultPGXmin:    "mariadb-purge-pin",
}

// Figures of MariaDB's database faults.
const (
	figMariaLostLeases = "mariadb-kill-9-lost-lease-events" // claims and settles lost, at least
	figMariaLostEff    = "mariadb-kill-9-lost-effects"      // effects lost, at least
	figMariaHogConns   = "mariadb-max-connections-held"
	figMariaHogRefused = "mariadb-max-connections-refusals"
	figMariaHogEnded   = "mariadb-max-connections-ended"
	figMariaPurge      = "mariadb-purge-pin-history-length" // undo logs purge had to keep, summed
)

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
	return &mariaBackend{sqlBackend: sqlBackend{db: db}, srv: srv}
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

func (b *mariaBackend) skips(kind string) bool {
	// Every commit on MariaDB is durable (innodb_flush_log_at_trx_commit
	// is the server's, not a session's): no relay commits asynchronously,
	// so there is no asynchronous backlog for a crash to take.
	return kind == FaultPGCrashAsync
}

func (b *mariaBackend) faultName(kind string) string {
	if n, ok := mariaNames[kind]; ok {
		return n
	}
	return kind
}

func (b *mariaBackend) newDriver(t *testing.T) driver.Driver {
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

// setup migrates the outbox and adds the history tables, and the outbox
// triggers that record every claim and settle (chaosworker sets
// @chaos_name and @chaos_now on its sessions).
func (b *mariaBackend) setup(h *harness) {
	drv, err := mysql.New(b.db, &mysql.Config{Schema: chaosSchema})
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := drv.Migrate(h.ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		h.t.Fatal(err)
	}
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
		if err := b.grantRows(h.ctx, "GRANT", tb, relayRole("a"), relayRole("b"), roleReceiver); err != nil {
			h.t.Fatal(err)
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

// grantRows grants (or revokes) reading and writing the rows of table.
func (b *mariaBackend) grantRows(ctx context.Context, verb, table string, users ...string) error {
	to := " TO "
	if verb == "REVOKE" {
		to = " FROM "
	}
	names := make([]string, len(users))
	for i, u := range users {
		names[i] = u + "@'%'"
	}
	q := verb + " SELECT, INSERT, UPDATE, DELETE ON " + chaosDatabase + "." + table + to + strings.Join(names, ", ")
	if _, err := b.db.ExecContext(ctx, q); err != nil {
		return errors.New(q + ": " + err.Error())
	}
	return nil
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

func (b *mariaBackend) dbFault(ctx context.Context, h *harness, kind, a string) {
	switch kind {
	case FaultPGCrash:
		b.crash(ctx, h)
	case FaultPGRestart:
		h.logf("nemesis: MariaDB normal shutdown and start")
		if err := b.srv.Restart(h.ctx); err != nil {
			h.t.Errorf("restart: %v", err)
		}
		b.reset()
	case FaultPGConns:
		b.exhaust(ctx, h)
	case FaultPGRevoke:
		b.revoke(ctx, h, a)
	case FaultPGXmin:
		b.pinPurge(ctx, h)
	}
}

// crash kills mariadbd with SIGKILL while the producers commit, and starts
// it a second later: InnoDB recovers from its redo log. Every commit was
// flushed before it returned, so the figures of what it lost should be 0.
func (b *mariaBackend) crash(ctx context.Context, h *harness) {
	var floorL, floorE int64
	_ = b.queryRow(h.ctx, "SELECT coalesce(max(seq), 0) FROM "+b.table("chaos_leases")).Scan(&floorL)
	_ = b.queryRow(h.ctx, "SELECT coalesce(max(seq), 0) FROM "+b.table("chaos_effects")).Scan(&floorE)
	sleepCtx(ctx, time.Second)
	seen := func(table string, floor int64) (top, n int64) {
		_ = b.queryRow(h.ctx, "SELECT coalesce(max(seq), $1), count(*) FROM "+b.table(table)+" WHERE seq > $1", floor).Scan(&top, &n)
		return top, n
	}
	topL, preL := seen("chaos_leases", floorL)
	topE, preE := seen("chaos_effects", floorE)
	h.logf("nemesis: MariaDB killed (SIGKILL)")
	if err := b.srv.Kill(); err != nil {
		h.t.Errorf("kill: %v", err)
	}
	sleepCtx(ctx, time.Second)
	start := time.Now()
	if err := b.srv.Start(h.ctx); err != nil {
		h.t.Errorf("start after the kill: %v", err)
		return
	}
	b.reset()
	kept := func(table string, floor, top int64) int64 {
		var n int64
		_ = b.queryRow(h.ctx, "SELECT count(*) FROM "+b.table(table)+" WHERE seq > $1 AND seq <= $2", floor, top).Scan(&n)
		return n
	}
	lostL := max(preL-kept("chaos_leases", floorL, topL), 0)
	lostE := max(preE-kept("chaos_effects", floorE, topE), 0)
	h.fault(figMariaLostLeases, int(lostL))
	h.fault(figMariaLostEff, int(lostE))
	h.logf("nemesis: MariaDB back after crash recovery in %s; lost %d lease events and %d effects",
		time.Since(start).Round(time.Millisecond), lostL, lostE)
	if lostL+lostE > 0 {
		// Every commit is flushed before it returns (innodb_flush_log_at_trx_commit=1):
		// a kill -9 may lose none (docs/reliability.md, "On MariaDB").
		h.t.Errorf("MariaDB lost %d committed lease events and %d effects in a kill -9", lostL, lostE)
	}
}

// exhaust: sessions of another user take every connection slot until the
// server refuses them, the workers' sessions are killed, and for the hold
// the hog keeps taking every slot that frees. The harness connects
// through the extra port, which max_connections does not bound.
func (b *mariaBackend) exhaust(ctx context.Context, h *harness) {
	hold, _ := h.p.dbHolds()
	cfg := gomysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.Timeout = roleHog, "tcp", "127.0.0.1:"+strconv.Itoa(b.srv.Port), 5*time.Second
	hog, err := gomysql.NewConnector(cfg)
	if err != nil {
		h.t.Errorf("fill the connection slots: %v", err)
		return
	}
	var mu sync.Mutex
	var conns []sqldriver.Conn
	refused := 0
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	connect := func() (bool, error) {
		c, err := hog.Connect(h.ctx)
		var me *gomysql.MySQLError
		switch {
		case errors.As(err, &me) && me.Number == 1040: // too many connections
			mu.Lock()
			refused++
			mu.Unlock()
			return false, nil
		case err != nil:
			return false, err
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		return true, nil
	}
	for ctx.Err() == nil {
		ok, err := connect()
		if err != nil {
			h.t.Errorf("fill the connection slots: %v", err)
			return
		}
		if !ok {
			break
		}
	}
	ended, err := b.kill(h.ctx, relayRole("a"), relayRole("b"), roleReceiver)
	if err != nil {
		h.t.Errorf("end the workers' sessions: %v", err)
	}
	until := time.Now().Add(hold)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(until) && ctx.Err() == nil {
				ok, err := connect()
				if err != nil {
					h.t.Errorf("fill the connection slots: %v", err)
					return
				}
				if !ok {
					sleepCtx(ctx, 10*time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	h.fault(figMariaHogConns, len(conns))
	h.fault(figMariaHogRefused, refused)
	h.fault(figMariaHogEnded, ended)
	h.logf("nemesis: %d other sessions held every free connection slot for %s; %d worker sessions killed", len(conns), hold, ended)
}

// revoke takes from one app's relay user, in turn: DELETE on the outbox
// (settles of delivered rows fail), UPDATE on it (claims fail), and the
// rows of every table (everything fails, the election too); then grants
// it back.
func (b *mariaBackend) revoke(ctx context.Context, h *harness, a string) {
	r := revocations[h.dbs.revokes%len(revocations)]
	h.dbs.revokes++
	user := relayRole(a) + "@'%'"
	outbox := chaosDatabase + "." + b.table("outbox")
	var take, give []string
	switch r.name {
	case "delete":
		take = []string{"REVOKE DELETE ON " + outbox + " FROM " + user}
		give = []string{"GRANT DELETE ON " + outbox + " TO " + user}
	case "update":
		take = []string{"REVOKE UPDATE ON " + outbox + " FROM " + user}
		give = []string{"GRANT UPDATE ON " + outbox + " TO " + user}
	default:
		for _, tb := range b.tables {
			take = append(take, "REVOKE SELECT, INSERT, UPDATE, DELETE ON "+chaosDatabase+"."+tb+" FROM "+user)
			give = append(give, "GRANT SELECT, INSERT, UPDATE, DELETE ON "+chaosDatabase+"."+tb+" TO "+user)
		}
	}
	hold := h.p.lease + h.p.lease/2
	h.logf("nemesis: REVOKE %s from %s for %s (%d statements)", r.name, user, hold, len(take))
	for _, q := range take {
		if _, err := b.db.ExecContext(h.ctx, q); err != nil {
			h.t.Errorf("%s: %v", q, err)
		}
	}
	sleepCtx(ctx, hold)
	for _, q := range give {
		if _, err := b.db.ExecContext(h.ctx, q); err != nil {
			h.t.Errorf("%s: %v", q, err)
		}
	}
	h.fault(b.faultName(FaultPGRevoke)+"-"+r.name, 1)
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

// pinPurge holds a consistent snapshot for the hold, MariaDB's pinned
// horizon: InnoDB's purge may remove no undo log written since, so the
// history list grows and the relays' locking reads of the outbox walk
// ever longer version chains of its hot rows.
func (b *mariaBackend) pinPurge(ctx context.Context, h *harness) {
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
