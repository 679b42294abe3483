package mysql

import (
	"embed"
	"strings"
)

// The named statements: the inbox queue protocol that apps in any language
// run (docs/mysql.md) and the at-most-once steps. {{p}} is the table
// prefix and {{now}} the database clock in microseconds; {{ids}} and
// {{types}} stand for one placeholder per value, filled at the call.
//
//go:embed queries/*.sql
var queryFS embed.FS

// loadQuery reads queries/name.sql with the prefix and the clock put in.
func loadQuery(prefix, name string) string {
	b, err := queryFS.ReadFile("queries/" + name + ".sql")
	if err != nil {
		panic(err) // embedded at build time; missing means a broken build
	}
	return strings.NewReplacer("{{p}}", prefix, "{{now}}", nowExpr).Replace(string(b))
}

// named holds every statement of queries/, loaded once per prefix.
type named struct {
	queueInsert, queueClaim, queueApplied, queueFailed, queueDead, queueStats, purgeInboxQueue string
	deliveredMinutes                                                                           string
	mark, markLock, claimInDoubt, doubtRows                                                    string
	resolveDelivered, resolveKept, resolveRetry, resolveDead, resolveRecord                    string
	electionAcquire                                                                            string
}

func loadNamed(p string) named {
	l := func(n string) string { return loadQuery(p, n) }
	return named{
		queueInsert: l("inbox_queue_insert"), queueClaim: l("inbox_claim"), queueApplied: l("inbox_applied"),
		queueFailed: l("inbox_failed"), queueDead: l("inbox_dead"), queueStats: l("inbox_queue_stats"),
		purgeInboxQueue: l("purge_inbox_queue"), deliveredMinutes: l("delivered_minutes"),
		mark: l("mark"), markLock: l("mark_lock"), claimInDoubt: l("claim_in_doubt"), doubtRows: l("doubt_rows"),
		resolveDelivered: l("resolve_delivered"), resolveKept: l("resolve_delivered_kept"),
		resolveRetry: l("resolve_retry"), resolveDead: l("resolve_dead"), resolveRecord: l("resolve_record"),
		electionAcquire: l("election_acquire"),
	}
}

// withList puts n placeholders where the statement has {{ids}} or
// {{types}}.
func withList(q string, n int) string {
	m := marks(n)
	return strings.NewReplacer("{{ids}}", m, "{{types}}", m).Replace(q)
}
