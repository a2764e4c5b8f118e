#!/usr/bin/env bash
# Starts and stops a private PgBouncer in front of a PostgreSQL server, for
# tests and for trying idem behind a pooler. scripts/pgbouncer runs this
# file; internal/testpgbouncer embeds it and writes it beside the poolers it
# starts, so the tests need no source tree to find it.
#
#   scripts/pgbouncer install          install PgBouncer when it is missing
#   scripts/pgbouncer start DIR URL [--session] [--pool-size N]
#                                      start a PgBouncer in DIR on a free
#                                      loopback port in front of the server
#                                      URL names (postgres://USER@HOST:PORT/…,
#                                      as scripts/pg prints it), and print the
#                                      postgres:// URL to connect through it
#   scripts/pgbouncer restart DIR      kill it (SIGKILL: every client and
#                                      server connection is cut) and start it
#                                      again on the same port
#   scripts/pgbouncer stop DIR         stop it and remove DIR
#
# The pooler runs in transaction mode (pool_mode = transaction, the mode
# that shares a server connection between clients' transactions), or in
# session mode with --session. Each database and user pair gets a pool of
# --pool-size server connections (default 20). Clients authenticate with a
# password from DIR's auth file (md5), which the printed URL carries; the
# pooler reaches the server as the URL's user without one (scripts/pg's
# clusters trust loopback connections). Every startup parameter idem does
# not send through a pooler is refused, as PgBouncer does by default: none
# is silently dropped (ignore_startup_parameters stays empty).
#
# When PgBouncer is not installed and we are root, Debian's pgbouncer package
# is installed first, unless IDEM_PG_NO_INSTALL is set (as the tests set it:
# they never install). Running as root, the pooler runs as the postgres user
# (PgBouncer refuses root). Nothing is written outside DIR.
set -euo pipefail

# The shared helpers (free_port, as_owner, install_packages): beside this
# file where a test wrote both, in internal/testserver/ in the repository.
testserver_lib=$(dirname "${BASH_SOURCE[0]}")/testserver.bash
[ -f "$testserver_lib" ] || testserver_lib=$(dirname "${BASH_SOURCE[0]}")/../testserver/testserver.bash
# shellcheck source=../testserver/testserver.bash
source "$testserver_lib"

find_pgbouncer() {
  local p
  for p in "$(command -v pgbouncer 2>/dev/null || true)" /usr/sbin/pgbouncer /usr/bin/pgbouncer; do
    [ -n "$p" ] && [ -x "$p" ] && { echo "$p"; return; }
  done
  return 1
}

install_pgbouncer() { install_packages pgbouncer 'PgBouncer' IDEM_PG_NO_INSTALL pgbouncer; }

# launch starts the pooler in DIR as a daemon and waits until it listens,
# for up to 10 s: a loaded machine may be slow to start it. A start that
# died (its port still held by the pooler just killed) is tried again.
launch() {
  local dir=$1 port attempt pid
  port=$(cat "$dir/port")
  for attempt in 1 2 3 4 5; do
    rm -f "$dir/pgbouncer.pid"
    as_owner "$(cat "$dir/bin")" -d -q "$dir/pgbouncer.ini" || { sleep 0.2; continue; }
    for _ in $(seq 1 200); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
      pid=$(cat "$dir/pgbouncer.pid" 2>/dev/null || true)
      if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then break; fi
      sleep 0.05
    done
    kill_pooler "$dir" KILL
    sleep 0.2
  done
  echo "scripts/pgbouncer: the pooler in $dir does not listen on port $port" >&2
  tail -20 "$dir/pgbouncer.log" >&2 2>/dev/null || true
  exit 1
}

# kill_pooler ends DIR's pooler with sig and waits for it to be gone: the
# process its pid file names and any other started on DIR's configuration
# (a start whose pid file was not written yet).
kill_pooler() {
  local dir=$1 sig=$2 pid pids
  pids=$(pgrep -f -- "$dir/pgbouncer.ini" || true)
  [ -f "$dir/pgbouncer.pid" ] && pids="$pids $(cat "$dir/pgbouncer.pid")"
  for pid in $pids; do kill "-$sig" "$pid" 2>/dev/null || true; done
  for pid in $pids; do
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      # A daemon killed is a zombie until its parent (init) reaps it: gone
      # for our purpose, its port free.
      [ "$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null)" = Z ] && break
      sleep 0.05
    done
  done
}

usage="usage: scripts/pgbouncer install | start DIR URL [--session] [--pool-size N] | restart DIR | stop DIR"
cmd=${1:-}; dir=${2:-}
if [ "$cmd" = install ]; then
  find_pgbouncer >/dev/null || install_pgbouncer
  exit 0
fi
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "$usage" >&2; exit 2; }
# From /, with DIR absolute: pgbouncer runs as the postgres user, who may
# not enter the directory the script was run from.
case $dir in /*) ;; *) dir=$PWD/$dir ;; esac
cd /

case "$cmd" in
start)
  url=${3:-}
  [ -n "$url" ] || { echo "$usage" >&2; exit 2; }
  shift 3
  mode=transaction; size=20
  while [ $# -gt 0 ]; do
    case "$1" in
    --session) mode=session ;;
    --pool-size) size=$2; shift ;;
    *) echo "$usage" >&2; exit 2 ;;
    esac
    shift
  done
  re='^postgres(ql)?://([^:@/]+)(:[^@/]*)?@([^:/?]+):([0-9]+)/([^?]*)'
  [[ "$url" =~ $re ]] || { echo "scripts/pgbouncer: want postgres://USER@HOST:PORT/DB, not $url" >&2; exit 2; }
  user=${BASH_REMATCH[2]}; host=${BASH_REMATCH[4]}; pgport=${BASH_REMATCH[5]}; db=${BASH_REMATCH[6]:-postgres}
  bin=$(find_pgbouncer) || { install_pgbouncer; bin=$(find_pgbouncer); }
  mkdir -p "$dir"
  password=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  port=$(free_port)
  echo "$bin" >"$dir/bin"
  echo "$port" >"$dir/port"
  echo "\"$user\" \"$password\"" >"$dir/userlist.txt"
  cat >"$dir/pgbouncer.ini" <<INI
[databases]
* = host=$host port=$pgport

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = md5
auth_file = $dir/userlist.txt
pool_mode = $mode
default_pool_size = $size
max_client_conn = 1000
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
admin_users = $user
server_login_retry = 1
query_wait_timeout = 120
INI
  chmod 600 "$dir/userlist.txt"
  [ "$(id -u)" = 0 ] && chown -R postgres:postgres "$dir"
  launch "$dir"
  echo "postgres://$user:$password@127.0.0.1:$port/$db?sslmode=disable"
  ;;
restart)
  kill_pooler "$dir" KILL
  launch "$dir"
  ;;
stop)
  kill_pooler "$dir" TERM
  kill_pooler "$dir" KILL
  rm -rf "$dir"
  ;;
*)
  echo "$usage" >&2; exit 2
  ;;
esac
