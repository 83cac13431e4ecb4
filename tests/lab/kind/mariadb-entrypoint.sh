#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Debian's mariadbd as the mariadb-operator runs a MariaDB image, for hpcops.slinky's kind
# images. The operator relies on the entrypoint contract of MariaDB's own image:
#   env:  MARIADB_ROOT_PASSWORD (or MARIADB_ALLOW_EMPTY_ROOT_PASSWORD=yes),
#         MARIADB_ROOT_HOST (the operator sends "%"), MYSQL_TCP_PORT;
#   args: mariadbd's options (the MariaDB resource's spec.args), or a command to run.
# On an empty data directory it initialises one with root's password, for root@localhost
# (the operator's probes log in through the socket) and root@MARIADB_ROOT_HOST (the operator
# itself connects through the Service). Users, grants and databases are the operator's work.
set -euo pipefail

datadir=/var/lib/mysql
socket=/run/mysqld/mysqld.sock

if (($#)) && [[ $1 != -* ]]; then
  exec "$@"  # a command of its own (the operator's Backup and Restore jobs run mariadb-dump)
fi

sql_string() {  # a value as an SQL string literal
  local value=${1//\\/\\\\}
  printf "'%s'" "${value//\'/\\\'}"
}

if [[ ! -d $datadir/mysql ]]; then
  if [[ -z ${MARIADB_ROOT_PASSWORD:-} && ${MARIADB_ALLOW_EMPTY_ROOT_PASSWORD:-} != yes ]]; then
    echo "mariadb-entrypoint: set MARIADB_ROOT_PASSWORD (or MARIADB_ALLOW_EMPTY_ROOT_PASSWORD=yes)" >&2
    exit 1
  fi
  echo "mariadb-entrypoint: initialising $datadir"
  mariadb-install-db --datadir="$datadir" --auth-root-authentication-method=normal \
    --skip-test-db --skip-name-resolve >/dev/null
  mariadbd --datadir="$datadir" --skip-networking --socket="$socket.init" &
  for _ in $(seq 60); do
    mariadb-admin --socket="$socket.init" ping >/dev/null 2>&1 && break
    sleep 0.5
  done
  password=$(sql_string "${MARIADB_ROOT_PASSWORD:-}")
  host=$(sql_string "${MARIADB_ROOT_HOST:-%}")
  mariadb --socket="$socket.init" -uroot <<SQL
ALTER USER 'root'@'localhost' IDENTIFIED BY $password;
CREATE USER IF NOT EXISTS 'root'@$host IDENTIFIED BY $password;
GRANT ALL PRIVILEGES ON *.* TO 'root'@$host WITH GRANT OPTION;
-- mariadb-install-db's other root accounts have no password.
DELETE FROM mysql.global_priv WHERE User = 'root' AND Host NOT IN ('localhost', $host);
FLUSH PRIVILEGES;
SQL
  MYSQL_PWD=${MARIADB_ROOT_PASSWORD:-} mariadb-admin --socket="$socket.init" -uroot shutdown
  wait
fi

exec mariadbd --datadir="$datadir" --socket="$socket" ${MYSQL_TCP_PORT:+--port="$MYSQL_TCP_PORT"} "$@"
