#!/usr/bin/env bash
# Builds the command's container image, reproducibly and without a
# registry or a container runtime (docs/development.md, "Releases"):
#
#   scripts/image.sh VERSION        # e.g. v0.1.0, at the release's tag
#
# 1. `go install …/cmd/mensageria@VERSION` with CGO_ENABLED=0, -trimpath
#    and -ldflags="-s -w" (the build information stays), from the module proxy of this tree at VERSION
#    (scripts/gowork-off.sh --once): the binary a user's `go install`
#    builds, static;
# 2. tools/ociimage packs it as an OCI image layout (no base image, user
#    65532, ENTRYPOINT ["mensageria"], OCI labels), every timestamp the
#    commit's time (SOURCE_DATE_EPOCH), so the same commit gives the same
#    digest.
#
# It writes dist/mensageria-VERSION.oci/ and dist/mensageria-VERSION.oci.tar
# (`docker load -i` or `podman load -i` it; it is tagged mensageria:VERSION)
# and prints the manifest digest.
set -euo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}
[ $# -eq 1 ] || { echo "usage: $0 VERSION" >&2; exit 2; }
version=$1
out=dist
mkdir -p "$out/bin"
gobin=$(cd "$out/bin" && pwd)
CGO_ENABLED=0 GOBIN=$gobin GOFLAGS="${GOFLAGS:-} -trimpath" MODULE_VERSION=$version \
  bash scripts/gowork-off.sh --once $go install -ldflags="-s -w" "github.com/xadm/mensageria/cmd/mensageria@$version"
revision=$(git rev-parse HEAD)
if [ -n "$(git status --porcelain)" ]; then revision="$revision-modified"; fi
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
ca=()
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then ca=(-ca-certs /etc/ssl/certs/ca-certificates.crt); fi
rm -rf "$out/mensageria-$version.oci"
$go run ./tools/ociimage -binary "$gobin/mensageria" -version "$version" -revision "$revision" "${ca[@]}" \
  -out "$out/mensageria-$version.oci" -tar "$out/mensageria-$version.oci.tar"
