#!/usr/bin/env bash
# Starts the services the tests need, if they are not running. Safe to run
# any number of times; used by `make test` and so by CI.
set -euo pipefail

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
if ! pg_up; then
  echo "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  for _ in $(seq 1 30); do pg_up && break; sleep 1; done
fi
pg_up || { echo "PostgreSQL did not start" >&2; exit 1; }
# The tests' database; every test makes its own schema inside it.
psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" | grep -q 1 \
  || psql -h 127.0.0.1 -U postgres -d postgres -c "CREATE DATABASE test"

nats_up() { (exec 3<>/dev/tcp/127.0.0.1/4222) 2>/dev/null; }
if ! nats_up; then
  echo "starting NATS"
  mkdir -p /var/lib/nats-server
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
  for _ in $(seq 1 30); do nats_up && break; sleep 0.5; done
fi
nats_up || { echo "NATS did not start" >&2; exit 1; }

# MariaDB, for the MySQL driver (driver/mysql) and the command on it: the
# tests' database is test, reached as root without a password from
# 127.0.0.1 (mysqltest.DefaultURL); every test makes its own database.
mysql_up() { mysqladmin --protocol=tcp -h 127.0.0.1 -P 3306 -u root ping >/dev/null 2>&1; }
if ! mysql_up; then
  if ! command -v mysqld_safe >/dev/null 2>&1 && ! command -v mariadbd-safe >/dev/null 2>&1; then
    echo "installing mariadb-server"
    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y mariadb-server
  fi
  echo "starting MariaDB"
  service mariadb start >/dev/null 2>&1 || service mysql start >/dev/null 2>&1 || {
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
    (nohup mysqld_safe --bind-address=127.0.0.1 >/var/log/mysqld_safe.log 2>&1 &)
  }
  for _ in $(seq 1 60); do mysql_up && break; sleep 0.5; done
fi
mysql_up || { echo "MariaDB did not start" >&2; exit 1; }
# root over TCP without a password (Debian's root authenticates by socket
# only), and the tests' database.
mysql --protocol=tcp -h 127.0.0.1 -u root -e "SELECT 1" >/dev/null 2>&1 \
  || mysql -u root -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket; CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY ''; GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION; FLUSH PRIVILEGES"
mysql --protocol=tcp -h 127.0.0.1 -u root -e "CREATE DATABASE IF NOT EXISTS test CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"

# The SQLite driver's black-box tests enqueue with a plain INSERT from the
# programs other apps use, on the SQLite the distribution ships: Python's
# sqlite3 module and the sqlite3 shell.
tools=()
command -v sqlite3 >/dev/null 2>&1 || tools+=(sqlite3)
command -v python3 >/dev/null 2>&1 || tools+=(python3)
if [ "${#tools[@]}" -gt 0 ]; then
  echo "installing ${tools[*]}"
  apt-get update && apt-get install -y "${tools[@]}"
fi
echo "services: PostgreSQL, NATS and MariaDB are up; python3 and sqlite3 are installed"

# Java, Node.js and the contract tools, for the tests in other languages.
bash scripts/polyglot.sh

# Chromium, for the web console's browser tests (cmd/mensageria/internal/console).
bash scripts/chromium.sh
