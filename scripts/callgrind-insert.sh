#!/usr/bin/env bash
# Counts the instructions a PostgreSQL backend spends on one autocommitted
# INSERT into a mensageria outbox: deterministic, so designs of the enqueue
# path can be compared on a busy machine (ADR 0020). The backend runs in
# single-user mode under callgrind; the figure is the difference between a
# run of N1 and one of N2 statements, divided by N2-N1, so start-up cancels.
#
#   scripts/callgrind-insert.sh DATADIR SCHEMA [ROWS] [prepared]
#
# DATADIR: a stopped cluster (initdb'd, owned by the postgres user) whose
# database "test" has SCHEMA migrated and the type t.one owned, e.g. by
# `mensageria migrate up` and `mensageria owners register` against it while
# it ran. ROWS per INSERT (default 1); "prepared": EXECUTE of a PREPAREd
# INSERT instead of a plain one (what a driver's statement cache does).
# Needs valgrind (Debian package valgrind); runs as root or postgres.
set -euo pipefail
datadir=$1 schema=$2 rows=${3:-1} mode=${4:-plain}
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
headers='{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}'
tmp=$(mktemp -d)
chmod 777 "$tmp" # the postgres user writes the profile there
count() {
	local n=$1 f=$tmp/in.$1.sql
	{
		# Valgrind runs the backend some fifty times slower than it runs,
		# so every statement would find the wake-up's 10 ms debounce over
		# and notify; at production rates nearly none does. Widen the
		# window for the run, and put it back after: both runs do it, so
		# it cancels out of the difference.
		echo "DO \$\$ BEGIN EXECUTE replace(pg_get_functiondef('$schema.outbox_enqueue'::regproc), 'BETWEEN 0 AND 9', 'BETWEEN 0 AND 86400000'); END \$\$;"
		echo "SELECT pg_catalog.setval('$schema.outbox_wakeup_at', (extract(epoch FROM clock_timestamp()) * 1000)::bigint);"
		if [ "$mode" = prepared ] && [ "$rows" = 1 ]; then
			echo "PREPARE p(text) AS INSERT INTO $schema.outbox (type, key, payload, headers) VALUES ('t.one', \$1, '{\"a\":1}', '$headers');"
		elif [ "$mode" = prepared ]; then
			echo "PREPARE p(text) AS INSERT INTO $schema.outbox (type, key, payload, headers) SELECT 't.one', \$1 || '-' || g, '{\"a\":1}', '$headers' FROM generate_series(1, $rows) g;"
		fi
		for i in $(seq "$n"); do
			if [ "$mode" = prepared ]; then
				echo "EXECUTE p('k$i');"
			elif [ "$rows" = 1 ]; then
				echo "INSERT INTO $schema.outbox (type, key, payload, headers) VALUES ('t.one', 'k$i', '{\"a\":1}', '$headers');"
			else
				echo "INSERT INTO $schema.outbox (type, key, payload, headers) SELECT 't.one', 'k$i-' || g, '{\"a\":1}', '$headers' FROM generate_series(1, $rows) g;"
			fi
		done
		echo "TRUNCATE $schema.outbox;"
		echo "DO \$\$ BEGIN EXECUTE replace(pg_get_functiondef('$schema.outbox_enqueue'::regproc), 'BETWEEN 0 AND 86400000', 'BETWEEN 0 AND 9'); END \$\$;"
	} >"$f"
	chmod 644 "$f"
	local run=(valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$n" "$bin/postgres" --single -D "$datadir" -c fsync=off -c synchronous_commit=off test)
	if [ "$(id -u)" = 0 ]; then
		su postgres -c "$(printf '%q ' "${run[@]}") < $f > /dev/null 2>&1"
	else
		"${run[@]}" <"$f" >/dev/null 2>&1
	fi
	callgrind_annotate "$tmp/cg.$n" | awk '/PROGRAM TOTALS/ && !done {gsub(",", "", $1); print $1; done = 1}'
}
small=$(count 100)
large=$(count 600)
echo "$schema rows=$rows $mode: $(((large - small) / 500)) instructions per INSERT statement"
rm -rf "$tmp"
