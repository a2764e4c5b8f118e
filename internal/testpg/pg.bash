#!/usr/bin/env bash
# Starts and stops a throwaway PostgreSQL cluster for tests and benchmarks.
# scripts/pg runs this file; internal/testpg embeds it and writes it beside
# the clusters it starts, so the tests need no source tree to find it.
#
#   scripts/pg install                 install PostgreSQL when it is missing
#   scripts/pg start DIR [--durable|--crash-safe]
#                                      initdb DIR, start it on a free loopback
#                                      port, print its postgres:// URL
#   scripts/pg stop DIR                stop it and remove DIR
#   scripts/pg pause DIR               stop the server, keep its data
#   scripts/pg resume DIR              start it again on the same port
#   scripts/pg restart DIR             crash it (immediate-mode stop: no
#                                      checkpoint, recovery from WAL at start)
#                                      and start it again on the same port
#
# DIR's parent must be traversable by the postgres user when run as root.
#
# Without --durable the cluster trades crash safety for speed (fsync off),
# which is right for tests and wrong for benchmarks. --crash-safe keeps fsync
# off but commits synchronously, so that a crash of the server (restart), not
# of the machine, loses no acknowledged commit: for tests that crash it. When PostgreSQL is not
# installed and we are root, Debian's postgresql package is installed first,
# unless IDEM_PG_NO_INSTALL is set (as the tests set it: they never install).
# Nothing is written outside DIR, so the script also runs from a read-only
# copy of the module (bash pg.bash ..., no exec bit needed).
# Running as root, the cluster runs as the postgres user (PostgreSQL refuses
# root).
set -euo pipefail

# The shared helpers (free_port, as_owner, pg_bindir, install_packages): beside this
# file where a test wrote both, in internal/testserver/ in the repository.
testserver_lib=$(dirname "${BASH_SOURCE[0]}")/testserver.bash
[ -f "$testserver_lib" ] || testserver_lib=$(dirname "${BASH_SOURCE[0]}")/../testserver/testserver.bash
# shellcheck source=../testserver/testserver.bash
source "$testserver_lib"

install_postgres() { install_packages pg 'PostgreSQL' IDEM_PG_NO_INSTALL postgresql postgresql-contrib; }

cmd=${1:-}; dir=${2:-}
if [ "$cmd" = install ]; then
  pg_bindir >/dev/null || install_postgres
  exit 0
fi
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: scripts/pg install|start|stop|pause|resume|restart DIR [--durable|--crash-safe]" >&2; exit 2; }
# From /, with DIR absolute: the servers run as the postgres user, who may
# not enter the directory the script was run from (a checkout in a home
# only root may enter).
case $dir in /*) ;; *) dir=$PWD/$dir ;; esac
cd /

case "$cmd" in
start)
  bindir=$(pg_bindir) || { install_postgres; bindir=$(pg_bindir); }
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
  as_owner "$bindir/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; exit 1; }
  port=$(free_port)
  {
    echo "listen_addresses = '127.0.0.1'"
    echo "port = $port"
    echo "unix_socket_directories = '$dir'"
    echo "max_connections = 300"
    echo "shared_buffers = 256MB"
    if [ "${3:-}" = "--durable" ]; then
      echo "synchronous_commit = on"
    elif [ "${3:-}" = "--crash-safe" ]; then
      echo "fsync = off"
      echo "synchronous_commit = on"
      echo "full_page_writes = off"
    else
      echo "fsync = off"
      echo "synchronous_commit = off"
      echo "full_page_writes = off"
    fi
  } >>"$dir/data/postgresql.conf"
  as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null ||
    { cat "$dir/server.log" >&2; exit 1; }
  echo "$bindir" >"$dir/bindir"
  echo "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
  ;;
pause)
  as_owner "$(cat "$dir/bindir")/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
  ;;
resume)
  as_owner "$(cat "$dir/bindir")/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null ||
    { cat "$dir/server.log" >&2; exit 1; }
  ;;
restart)
  as_owner "$(cat "$dir/bindir")/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null
  as_owner "$(cat "$dir/bindir")/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null ||
    { cat "$dir/server.log" >&2; exit 1; }
  ;;
stop)
  if [ -f "$dir/bindir" ] && [ -d "$dir/data" ]; then
    as_owner "$(cat "$dir/bindir")/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
  ;;
*)
  echo "usage: scripts/pg install|start|stop|pause|resume|restart DIR [--durable|--crash-safe]" >&2; exit 2
  ;;
esac
