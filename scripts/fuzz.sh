#!/usr/bin/env bash
# Runs every fuzz target of every module of go.work for FUZZTIME each (default 30s).
# New inputs the fuzzer finds stay in the Go build cache; a failing one is
# written under the package's testdata/fuzz and fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-30s}"
grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r file; do
	pkg="$(dirname "$file")"
	grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //' | while read -r target; do
		echo "fuzz: $pkg $target ($fuzztime)"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
	done
done
