#!/usr/bin/env bash
# Runs a command in every module of go.work on its own go.mod (GOWORK=off),
# as a user of that module builds it, with the repository's other modules
# taken from this checkout: tools/modproxy serves the work tree's modules
# at the version the go.mod files require of one another (the last
# release's), from a file:// module proxy made for this run.
#
#   scripts/gowork-off.sh go vet ./...        # what `make lint` runs
#   scripts/gowork-off.sh go build ./...      # what scripts/release.sh runs
#   scripts/gowork-off.sh --once go install github.com/xadm/mensageria/cmd/mensageria@v0.1.0
#                                             # once, outside any module (scripts/image.sh)
#   scripts/gowork-off.sh --tidy              # go mod tidy in every module, on the
#                                             # committed go.mod and go.sum (after a
#                                             # dependency is added or dropped)
#
# Why the detours (docs/development.md, "Releases"):
# - The siblings' content is the moving tree, not the tagged one, so their
#   go.sum lines (computed by modproxy) go into a copy of each module's
#   go.mod and go.sum (-modfile), never into the committed go.sum; the
#   committed files are checked as they are (-mod=readonly, the default).
# - A version made here must never reach the shared module cache, where it
#   would stand for that version from then on: the run has a module cache
#   of its own, kept between runs (third-party modules stay, this
#   repository's are removed first), filled from the shared cache's
#   downloads before the network (GOPROXY=file://…).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
once=0
tidy=0
case "${1:-}" in
  --once) once=1; shift ;;
  --tidy) tidy=1; shift; set -- "${GO:-go}" mod tidy ;;
esac
[ $# -gt 0 ] || { echo "usage: $0 [--once] COMMAND [ARG...] | $0 --tidy" >&2; exit 2; }

go=${GO:-go}
shared_cache=$($go env GOMODCACHE)
upstream=$($go env GOPROXY)
cache=${MENSAGERIA_GOWORK_OFF_CACHE:-$($go env GOCACHE)/../mensageria-gowork-off-modcache}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
version=$($go run ./tools/modproxy -out "$work/proxy" -gosum "$work/siblings.sum" ${MODULE_VERSION:+-version "$MODULE_VERSION"})

# Drop what an earlier run served of this repository at this version: it
# was another tree. (Other versions there are other runs', e.g. a test's.)
if [ -d "$cache/github.com/xadm" ]; then
  find "$cache/github.com/xadm" -maxdepth 4 -type d -name "*@$version" -prune -exec chmod -R u+w {} + -exec rm -rf {} +
fi
if [ -d "$cache/cache/download/github.com/xadm" ]; then
  find "$cache/cache/download/github.com/xadm" -path "*/@v/$version.*" -exec rm -f {} +
fi

export GOWORK=off
# The go command indexes a module cache directory's packages once, in the
# build cache, keyed by its path: a module cache is taken to be immutable.
# Here this repository's modules come back at the same version with other
# content (a package added since the last run was "provided by no module"),
# so the index is off for these runs.
export GODEBUG="${GODEBUG:+$GODEBUG,}goindex=0"
export GOMODCACHE=$cache
export GOPROXY="file://$work/proxy,file://$shared_cache/cache/download,$upstream"
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}github.com/xadm/mensageria"
export GOFLAGS="${GOFLAGS:-} -modcacherw"

if [ "$once" = 1 ]; then
  mkdir -p "$work/outside"
  echo "${*} (GOWORK=off, this repository's modules at $version from the tree)"
  (cd "$work/outside" && "$@")
  exit
fi

i=0
for m in $(GOWORK= $go list -m -f '{{.Dir}}'); do
  i=$((i + 1))
  mf="$work/modfile/$i"
  mkdir -p "$mf"
  cp "$m/go.mod" "$mf/go.mod"
  # A release commit's go.sum may hold the siblings' lines of the tagged
  # content; this run serves the tree, so it uses the lines of the tree.
  { grep -v '^github.com/xadm/mensageria[ /]' "$m/go.sum" 2>/dev/null || true; cat "$work/siblings.sum"; } >"$mf/go.sum"
  echo "${*} in ${m#"$root"/} (GOWORK=off, siblings at $version from the tree)"
  if [ "$tidy" = 1 ]; then
    # Tidy the committed files, then take the siblings' lines out of go.sum
    # again: they are the lines of this tree, not of a release.
    (cd "$m" && "$@")
    if [ -f "$m/go.sum" ]; then
      grep -v '^github.com/xadm/mensageria[ /]' "$m/go.sum" >"$mf/go.sum.tidy" || true
      cat "$mf/go.sum.tidy" >"$m/go.sum"
    fi
    continue
  fi
  (cd "$m" && GOFLAGS="$GOFLAGS -modfile=$mf/go.mod" "$@")
done
