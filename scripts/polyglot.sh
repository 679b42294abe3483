#!/usr/bin/env bash
# Installs what the tests in other languages need, when it is missing: a
# JDK, Debian's PostgreSQL JDBC driver and Jackson for examples/java-inbox,
# Debian's MariaDB Connector/J for examples/java-inbox-mariadb, Node.js
# and npm, the `pg` package of examples/node-inbox and the contract tools
# of tools/ (Prism), each from its committed package-lock.json. Safe to run
# any number of times; run by scripts/services.sh, so by `make services`
# and `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."

debs=()
command -v javac >/dev/null 2>&1 || debs+=(default-jdk-headless)
[ -f /usr/share/java/postgresql.jar ] || debs+=(libpostgresql-jdbc-java)
[ -f /usr/share/java/jackson-databind.jar ] || debs+=(libjackson2-databind-java)
[ -f /usr/share/java/mariadb-java-client.jar ] || debs+=(libmariadb-java)
command -v node >/dev/null 2>&1 || debs+=(nodejs)
command -v npm >/dev/null 2>&1 || debs+=(npm)
if [ "${#debs[@]}" -gt 0 ]; then
  echo "installing ${debs[*]}"
  apt-get update && apt-get install -y --no-install-recommends "${debs[@]}"
fi

# npm ci only when node_modules is missing or older than the lock file:
# it deletes and reinstalls the whole tree every time it runs. Install
# scripts stay off: nothing these packages need runs one, and one of
# Prism's dependencies would otherwise report the install over the network.
for dir in tools examples/node-inbox; do
  lock="$dir/package-lock.json"
  stamp="$dir/node_modules/.package-lock.json"
  if [ ! -f "$stamp" ] || [ "$lock" -nt "$stamp" ]; then
    echo "npm ci in $dir"
    (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund)
  fi
done
echo "polyglot: javac $(javac -version 2>&1 | cut -d' ' -f2), the PostgreSQL and MariaDB JDBC drivers, Jackson, node $(node --version), prism and pg are installed"
