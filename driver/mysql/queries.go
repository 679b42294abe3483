package mysql

import (
	"embed"
	"strings"

	"github.com/xadm/mensageria/driver/sqlkit"
)

// The driver's statements, one file each in queries/, with a header saying
// what it does and why it is shaped so; the inbox queue's are also the
// protocol apps in any language run (docs/mysql.md).
//
//go:embed queries/*.sql
var queryFS embed.FS

// queriesFor returns the statements of a table prefix, loaded once in this
// process.
var queriesFor = sqlkit.PerPrefix(loadQueries)

// queries are the driver's statements, read from queries/*.sql with the
// table prefix and the fragments below filled in. {{ids}}, {{types}},
// {{cases}} and {{ordered}} stay, for the call to fill (withList,
// withLists), as does the VALUES row of an INSERT of many rows (withRows).
type queries struct {
	insert, insertScheduled, ownedTypes                                   string
	savepoint, savepointRollback, savepointRelease                        string
	clock, version                                                        string
	claimFence, claim, claimOrdered, claimMany, claimLease, claimedRows   string
	settleLock, settleDelivered, settleDeliveredKept, settleRelease       string
	settleRetry, settleDead, settleInDoubt, settleSort, deliveredCount    string
	nextDue, stats, statsOwners, deliveredMinutes                         string
	mark, markLock, claimInDoubt, claimInDoubtLease, doubtRows            string
	resolveDelivered, resolveKept, resolveRetry, resolveDead              string
	resolveRecord, resolutions, resolutionsOf                             string
	registerInsert, registerRead, registerAdopt, registerWindow           string
	owners, ownersOf, identity, transferLock, transferSet, transferDelete string
	electionAcquire, electionLock, electionRenew, electionTake            string
	electionRelease, electionHolder                                       string
	purgeOutbox, purgeInbox, purgeInboxQueue, purgeCounts, purgeConsumers string
	routeStateSet, routeStatePrune, routeStateList                        string
	routePauseSet, routePauseGet, routePauseLock, routePauseDelete        string
	routePauseList                                                        string
	inboxStale, inboxRecord, inboxFirst, offsetCreate, offsetRead         string
	offsetSet                                                             string
	queueInsert, queueClaim, queueApplied, queueFailed, queueDead         string
	queueAttempts, queueRowState, queueStats                              string
	migrateLock, migrateUnlock, migrationsOwner, migrationsOwnerSet       string
	schemaMigrated, schemaVersion                                         string
}

// The fragments the statements share, each written once:
//   - {{p}}, the table prefix;
//   - {{now}}, the database clock (nowExpr), in the statements that read
//     the clock themselves: those other programs run too (docs/mysql.md)
//     and those run outside a write transaction of the driver's;
//   - {{doubt}}, the test of a row in doubt (doubtCond);
//   - {{sched}}, the test of a scheduled row (schedCond);
//   - {{jobcols}}, the columns an outbox row is read as (jobCols);
//   - {{doubt_now}} and {{sched_now}}, the same tests at the statement's
//     own clock ({{now}}), for the reads outside a transaction, which so
//     read the clock in the statement instead of a round trip of its own.
//
// {{doubt}}, {{sched}} and {{jobcols}} each take now as one argument, in
// the place they stand in the statement. Every {{now}} of one statement
// is the same time: MariaDB and MySQL read UTC_TIMESTAMP once, when the
// statement starts.
func fragments(prefix string) *strings.Replacer {
	return strings.NewReplacer("{{p}}", prefix, "{{now}}", nowExpr, "{{doubt}}", doubtCond, "{{sched}}", schedCond, "{{jobcols}}", jobCols,
		"{{doubt_now}}", sqlkit.DoubtAt(nowExpr), "{{sched_now}}", schedAt(nowExpr))
}

// loadQueries reads every statement, for tables prefixed with prefix.
func loadQueries(prefix string) queries {
	fill := fragments(prefix)
	load := sqlkit.Loader(queryFS, "queries", fill)
	return queries{
		insert:            load("insert"),
		insertScheduled:   load("insert_scheduled"),
		ownedTypes:        load("owned_types"),
		savepoint:         load("savepoint"),
		savepointRollback: load("savepoint_rollback"),
		savepointRelease:  load("savepoint_release"),
		clock:             load("clock"),
		version:           load("version"),

		claimFence:          load("claim_fence"),
		claim:               load("claim"),
		claimOrdered:        load("claim_ordered"),
		claimMany:           load("claim_many"),
		claimLease:          load("claim_lease"),
		claimedRows:         load("claimed_rows"),
		settleLock:          load("settle_lock"),
		settleDelivered:     load("settle_delivered"),
		settleDeliveredKept: load("settle_delivered_kept"),
		settleRelease:       load("settle_release"),
		settleRetry:         load("settle_retry"),
		settleDead:          load("settle_dead"),
		settleInDoubt:       load("settle_in_doubt"),
		settleSort:          load("settle_sort"),
		deliveredCount:      load("delivered_count"),
		nextDue:             load("next_due"),
		stats:               load("stats"),
		statsOwners:         load("stats_owners"),
		deliveredMinutes:    load("delivered_minutes"),

		mark:              load("mark"),
		markLock:          load("mark_lock"),
		claimInDoubt:      load("claim_in_doubt"),
		claimInDoubtLease: load("claim_in_doubt_lease"),
		doubtRows:         load("doubt_rows"),
		resolveDelivered:  load("resolve_delivered"),
		resolveKept:       load("resolve_delivered_kept"),
		resolveRetry:      load("resolve_retry"),
		resolveDead:       load("resolve_dead"),
		resolveRecord:     load("resolve_record"),
		resolutions:       load("resolutions"),
		resolutionsOf:     load("resolutions_of"),

		registerInsert: load("register_insert"),
		registerRead:   load("register_read"),
		registerAdopt:  load("register_adopt"),
		registerWindow: load("register_window"),
		owners:         load("owners"),
		ownersOf:       load("owners_of"),
		identity:       load("identity"),
		transferLock:   load("transfer_lock"),
		transferSet:    load("transfer_set"),
		transferDelete: load("transfer_delete"),

		electionAcquire: load("election_acquire"),
		electionLock:    load("election_lock"),
		electionRenew:   load("election_renew"),
		electionTake:    load("election_take"),
		electionRelease: load("election_release"),
		electionHolder:  load("election_holder"),

		purgeOutbox:     load("purge_outbox"),
		purgeInbox:      load("purge_inbox"),
		purgeInboxQueue: load("purge_inbox_queue"),
		purgeCounts:     load("purge_counts"),
		purgeConsumers:  load("purge_consumers"),

		routeStateSet:    load("route_state_set"),
		routeStatePrune:  load("route_state_prune"),
		routeStateList:   load("route_state_list"),
		routePauseSet:    load("route_pause_set"),
		routePauseGet:    load("route_pause_get"),
		routePauseLock:   load("route_pause_lock"),
		routePauseDelete: load("route_pause_delete"),
		routePauseList:   load("route_pause_list"),

		inboxStale:   load("inbox_stale"),
		inboxRecord:  load("inbox_record"),
		inboxFirst:   load("inbox_first"),
		offsetCreate: load("offset_create"),
		offsetRead:   load("offset_read"),
		offsetSet:    load("offset_set"),

		queueInsert:   load("inbox_queue_insert"),
		queueClaim:    load("inbox_claim"),
		queueApplied:  load("inbox_applied"),
		queueFailed:   load("inbox_failed"),
		queueDead:     load("inbox_dead"),
		queueAttempts: load("inbox_attempts"),
		queueRowState: load("inbox_row_state"),
		queueStats:    load("inbox_queue_stats"),

		migrateLock:        load("migrate_lock"),
		migrateUnlock:      load("migrate_unlock"),
		migrationsOwner:    load("migrations_owner"),
		migrationsOwnerSet: load("migrations_owner_set"),
		schemaMigrated:     load("schema_migrated"),
		schemaVersion:      load("schema_version"),
	}
}

// jobCols are the columns scanJobs reads, a row in doubt read as
// driver.StateInDoubt; its test (doubtCond) takes now as an argument.
var jobCols = jobColsAt("?")

// jobColsAt is jobCols with the test of a row in doubt at now, an
// expression: "?" for an argument, nowExpr for the statement's own clock.
func jobColsAt(now string) string {
	return "id, message_id, type, `key`, payload, headers, CASE WHEN " + sqlkit.DoubtAt(now) + " THEN 'in_doubt' ELSE state END, attempts, created_at, available_at, delivered_at, last_error, last_route, attempted_at"
}

// doubtCond is true of a row in doubt at now (its one argument): pending,
// marked by an at-most-once attempt (queries/mark.sql), not under a live
// lease.
var doubtCond = sqlkit.DoubtAt("?")

// schedCond is true of a scheduled row at now (its one argument): pending,
// not due yet, never attempted and no error recorded (a retry's backoff
// records one). A claim counts an attempt, so a leased row, whose
// available_at the claim sets to its lease's end, is never one. Never
// NULL, so that NOT of it is true of every other row.
var schedCond = schedAt("?")

// schedAt is schedCond at now, an expression (as jobColsAt's).
func schedAt(now string) string {
	return "COALESCE(state = 'pending' AND attempted_at IS NULL AND available_at > " + now + " AND attempts = 0 AND last_error IS NULL, 0)"
}

// withList puts n placeholders where the statement has {{ids}} or
// {{types}}, and n "WHEN ? THEN ?" pairs where it has {{cases}}, the
// arms of a CASE that gives each of n rows a value of its own.
func withList(q string, n int) string {
	m := sqlkit.Marks(n)
	q = strings.ReplaceAll(strings.ReplaceAll(q, "{{ids}}", m), "{{types}}", m)
	if strings.Contains(q, "{{cases}}") {
		q = strings.ReplaceAll(q, "{{cases}}", strings.TrimSuffix(strings.Repeat("WHEN ? THEN ? ", n), " "))
	}
	return q
}

// withLists puts n placeholders for {{types}} and m for {{ordered}}.
func withLists(q string, n, m int) string {
	return strings.ReplaceAll(strings.ReplaceAll(q, "{{types}}", sqlkit.Marks(n)), "{{ordered}}", sqlkit.Marks(m))
}

// withRows repeats the VALUES row of an INSERT (its last VALUES, up to
// the end of the statement) n times.
func withRows(q string, n int) string {
	i := strings.LastIndex(q, "VALUES ")
	head, row := q[:i+len("VALUES ")], strings.TrimSuffix(strings.TrimSpace(q[i+len("VALUES "):]), ";")
	return head + strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
}
