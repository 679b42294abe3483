#!/usr/bin/env bash
# Tags a release of every module of the repository at HEAD
# (docs/development.md, "Releases"):
#
#   scripts/release.sh [--no-build] VERSION      # e.g. v0.1.0
#
# 1. refuses a dirty tree, a tag that exists, and a CHANGELOG.md without a
#    "## [X.Y.Z]" section;
# 2. sets every module's requirements of its siblings to VERSION (and the
#    go.work replacements that keep the workspace offline) and commits
#    that, when it changes anything;
# 3. builds every module with GOWORK=off against its siblings at VERSION,
#    served from this commit by a file:// module proxy
#    (scripts/gowork-off.sh): what a user's `go get …@VERSION` resolves;
# 4. creates the annotated tags: VERSION for the core, <dir>/VERSION for
#    each nested module.
#
# It pushes nothing: it prints the push command. --no-build skips step 3
# (its own test uses it).
set -euo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}

build=1
if [ "${1:-}" = --no-build ]; then build=0; shift; fi
[ $# -eq 1 ] || { echo "usage: $0 [--no-build] VERSION (vMAJOR.MINOR.PATCH)" >&2; exit 2; }
version=$1
if ! [[ $version =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "release: $version is not a semantic version vX.Y.Z" >&2; exit 2
fi
if [ "${BASH_REMATCH[1]}" != 0 ] && [ "${BASH_REMATCH[1]}" != 1 ]; then
  echo "release: $version: a major version above 1 changes every module path (/v${BASH_REMATCH[1]}); not done by this script" >&2; exit 2
fi

if [ -n "$(git status --porcelain)" ]; then
  echo "release: the work tree has changes; release from a clean commit" >&2
  git status --short >&2
  exit 1
fi
plain=${version#v}
if ! grep -q "^## \[$plain\]" CHANGELOG.md; then
  echo "release: CHANGELOG.md has no \"## [$plain]\" section; add it (the [Unreleased] entries, dated) and commit first" >&2
  exit 1
fi

# The modules: directory and path, the core first.
dirs_out=$(GOWORK= $go list -m -f '{{.Dir}}')
mapfile -t dirs <<<"$dirs_out"
declare -A path_of
tags=()
for d in "${dirs[@]}"; do
  rel=${d#"$PWD"}; rel=${rel#/}
  p=$(cd "$d" && GOWORK=off $go mod edit -json | sed -n 's/^\t\t"Path": "\(.*\)"$/\1/p' | head -n1)
  path_of[${rel:-.}]=$p
  if [ -z "$rel" ]; then tags+=("$version"); else tags+=("$rel/$version"); fi
done
for t in "${tags[@]}"; do
  if git rev-parse -q --verify "refs/tags/$t" >/dev/null; then
    echo "release: tag $t exists" >&2; exit 1
  fi
done

# Requirements of one another, and the workspace's replacements, at VERSION.
# Only what changes is edited: a release at a commit already at VERSION
# (the usual case, the requirements moved before the CHANGELOG's section
# was committed) leaves go.work as it is, comments included.
for rel in "${!path_of[@]}"; do
  [ "$rel" = . ] && continue
  req=$(cd "$rel" && GOWORK=off $go mod edit -json | grep -oE '"Path": "github\.com/xadm/mensageria(/[^"]*)?"' | sed 's/"Path": "\(.*\)"/\1/' | grep -vx "${path_of[$rel]}" || true)
  for p in $req; do
    (cd "$rel" && GOWORK=off $go mod edit -require="$p@$version")
  done
done
for rel in "${!path_of[@]}"; do
  p=${path_of[$rel]}
  [ "$rel" = . ] && target=./ || target=./$rel
  if $go work edit -json | tr -d ' \t\n' | grep -qF "\"Old\":{\"Path\":\"$p\",\"Version\":\"$version\"},\"New\":{\"Path\":\"$target\"}"; then
    continue
  fi
  old=$($go work edit -json | awk -v p="$p" '
    /"Old": \{/ {inold=1; path=""; ver=""}
    inold && /"Path":/ {gsub(/[",]/, "", $2); path=$2}
    inold && /"Version":/ {gsub(/[",]/, "", $2); ver=$2}
    inold && /\}/ {inold=0; if (path == p && ver != "") print ver}')
  for v in $old; do $go work edit -dropreplace="$p@$v"; done
  $go work edit -replace="$p@$version=$target"
done
if [ -n "$(git status --porcelain)" ]; then
  git add -u
  git commit -q -m "release: $version: the modules require one another at $version"
  echo "committed the requirements at $version: $(git log --oneline -1)"
fi

if [ "$build" = 1 ]; then
  bash scripts/gowork-off.sh $go build ./...
fi

for t in "${tags[@]}"; do
  git tag -a "$t" -m "mensageria $t"
  echo "tagged $t"
done
echo "push with: git push origin ${tags[*]}"
