#!/usr/bin/env bash
# Starts and stops a throwaway high-availability PostgreSQL cluster for
# tests and failover runs: one etcd and two PostgreSQL nodes managed by
# Patroni with streaming replication. scripts/patroni runs this file;
# internal/testpatroni embeds it and writes it beside the clusters it
# starts, so the tests need no source tree to find it.
#
#   scripts/patroni install            install Patroni and etcd when missing
#   scripts/patroni start DIR [--sync] [--watch PID]
#                                      start the cluster with its data in DIR,
#                                      every server on free loopback ports,
#                                      wait until one node leads and the other
#                                      streams from it, and print the
#                                      multi-host URL. --sync sets Patroni's
#                                      synchronous_mode (not strict: see
#                                      docs/operations.md). With --watch the
#                                      cluster is stopped (and DIR removed)
#                                      once process PID is gone
#   scripts/patroni stop DIR           stop everything and remove DIR
#   scripts/patroni url DIR            print the multi-host URL
#                                      (postgres://…@h1:p1,h2:p2/postgres?
#                                      target_session_attrs=read-write)
#   scripts/patroni primary DIR        print the leader's host:port
#   scripts/patroni wait DIR           wait until a leader runs with a standby
#                                      streaming from it (the synchronous
#                                      standby with --sync)
#   scripts/patroni kill-primary DIR   lose the leader's node: wait, SIGKILL
#                                      its Patroni and its postmaster with
#                                      every backend, wait until Patroni
#                                      promotes the standby, start the lost
#                                      node's Patroni again (it rejoins as a
#                                      standby: pg_rewind, or a new base
#                                      backup) and wait for it to stream
#
# Why Patroni dies with the postmaster: a Patroni that sees its own
# postmaster die while it holds the leader key starts it again in place
# (crash recovery, no failover). Losing the node is the fault a failover
# manager exists for.
#
# Timings are short so a failover takes seconds: ttl 8s, loop_wait 1s,
# retry_timeout 3s (loop_wait + 2 * retry_timeout <= ttl, as Patroni asks),
# with room for a Patroni slowed by a loaded machine.
# Each server's data and logs are under DIR; nothing is written elsewhere.
# fsync is off (a fault here kills processes, never the machine: the page
# cache survives) and full_page_writes and wal_log_hints are on, which
# pg_rewind needs. When Patroni or etcd is missing and we are root, Debian's
# patroni and etcd-server packages are installed first, unless
# IDEM_PATRONI_NO_INSTALL is set (as the tests set it: they never install).
# PostgreSQL is the newest major version installed (scripts/pg's choice).
# Running as root, every server runs as the postgres user (PostgreSQL
# refuses root), so DIR's parent must be traversable by it. Nothing else
# of the caller's needs to be: the script leaves the directory it was run
# from (a checkout inside a home only root may enter, whose Patroni's
# Python subprocesses could not return to) for /, and each server runs in
# its own directory under DIR, which the postgres user owns.
set -euo pipefail
self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")

# The shared helpers (free_port, as_owner, pg_bindir, install_packages): beside this
# file where a test wrote both, in internal/testserver/ in the repository.
testserver_lib=$(dirname "${BASH_SOURCE[0]}")/testserver.bash
[ -f "$testserver_lib" ] || testserver_lib=$(dirname "${BASH_SOURCE[0]}")/../testserver/testserver.bash
# shellcheck source=../testserver/testserver.bash
source "$testserver_lib"

installed() { command -v patroni >/dev/null 2>&1 && command -v etcd >/dev/null 2>&1 && pg_bindir >/dev/null; }

install_patroni() {
  install_packages patroni 'Patroni, etcd or PostgreSQL' IDEM_PATRONI_NO_INSTALL patroni etcd-server postgresql
}

nodes="node1 node2"

# spawn starts a server detached (its own session, output to LOG) as the
# owner, in LOG's directory, and records its pid in PIDFILE: the pid of
# the server itself, which bash execs, never of runuser.
spawn() {
  local pidfile=$1 log=$2; shift 2
  as_owner setsid bash -c 'echo $$ >"$1"; shift; log=$1; shift; cd "$(dirname "$log")"; exec "$@" >>"$log" 2>&1 </dev/null' \
    spawn "$pidfile" "$log" "$@" </dev/null >/dev/null 2>&1 &
  local i
  for i in $(seq 100); do [ -s "$pidfile" ] && return; sleep 0.05; done
  echo "scripts/patroni: $* did not start" >&2; exit 1
}

# kill_pidfile SIGKILLs the process named in PIDFILE, if it runs.
kill_pidfile() {
  [ -s "$1" ] || return 0
  kill -9 "$(cat "$1")" 2>/dev/null || true
  rm -f "$1"
}

# kill_postgres SIGKILLs a node's postmaster and every process it started
# (the backends too, as a lost machine takes them), by their pids.
kill_postgres() {
  local pidfile=$dir/$1/data/postmaster.pid pm children
  [ -s "$pidfile" ] || return 0
  pm=$(head -1 "$pidfile")
  children=$(ps -o pid= --ppid "$pm" 2>/dev/null || true)
  kill -9 "$pm" $children 2>/dev/null || true
}

api() { curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$(cat "$dir/$1/api.port")/$2" || true; }

# leader prints the node whose Patroni says it runs the primary.
leader() {
  local n
  for n in $nodes; do
    [ "$(api "$n" primary)" = 200 ] && { echo "$n"; return; }
  done
  return 1
}

psql_on() {
  "$(cat "$dir/bindir")/psql" -X -At -h 127.0.0.1 -p "$(cat "$dir/$1/pg.port")" -U postgres -d postgres -c "$2" 2>/dev/null
}

# healthy: a leader whose primary accepts writes and has a standby
# streaming from it; with --sync, the synchronous standby, as PostgreSQL
# reports it and as Patroni has recorded it in etcd (only a standby
# recorded there may be promoted, and Patroni records it a loop after
# PostgreSQL reports it).
healthy() {
  local l n want="state = 'streaming'"
  l=$(leader) || return 1
  [ "$(psql_on "$l" "SELECT NOT pg_is_in_recovery()" || echo f)" = t ] || return 1
  if [ "$(cat "$dir/mode")" = sync ]; then
    want="$want AND sync_state = 'sync'"
    for n in $nodes; do
      [ "$n" = "$l" ] || [ "$(api "$n" sync)" = 200 ] || return 1
    done
  fi
  [ "$(psql_on "$l" "SELECT count(*) FROM pg_stat_replication WHERE $want" || echo 0)" -ge 1 ]
}

wait_healthy() {
  local deadline=$((SECONDS + $1))
  until healthy; do
    if [ $SECONDS -ge $deadline ]; then
      echo "scripts/patroni: no leader with a streaming standby after $1s; see $dir/*/patroni.log" >&2
      return 1
    fi
    sleep 0.2
  done
}

# show_logs prints the end of each log named, under its name: one tail
# per file, as tail's obsolete -N form refuses several.
show_logs() {
  local f
  for f in "$@"; do
    echo "== $f"
    tail -n 30 "$f" 2>&1 || true
  done
}

start_patroni() { spawn "$dir/$1/patroni.pid" "$dir/$1/patroni.log" patroni "$dir/$1/patroni.yml"; }

url() {
  local hosts="" n
  for n in $nodes; do hosts="$hosts${hosts:+,}127.0.0.1:$(cat "$dir/$n/pg.port")"; done
  echo "postgres://postgres@$hosts/postgres?sslmode=disable&target_session_attrs=read-write"
}

cmd=${1:-}; dir=${2:-}
usage="usage: scripts/patroni install | start DIR [--sync] [--watch PID] | stop|url|primary|wait|kill-primary DIR"
if [ "$cmd" = install ]; then
  installed || install_patroni
  exit 0
fi
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "$usage" >&2; exit 2; }
shift 2
case $dir in /*) ;; *) dir=$PWD/$dir ;; esac
cd /

case "$cmd" in
start)
  mode=async; watch=
  while [ $# -gt 0 ]; do
    case $1 in
    --sync) mode=sync; shift ;;
    --watch) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }; watch=$2; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
    esac
  done
  installed || install_patroni
  mkdir -p "$dir/etcd"
  pg_bindir >"$dir/bindir"
  echo "$mode" >"$dir/mode"
  etcd_port=$(free_port); peer_port=$(free_port)
  echo "$etcd_port" >"$dir/etcd.port"
  for n in $nodes; do
    mkdir -p "$dir/$n"
    free_port >"$dir/$n/pg.port"
    free_port >"$dir/$n/api.port"
  done
  [ "$(id -u)" = 0 ] && chown -R postgres:postgres "$dir"
  chmod 700 "$dir/etcd"
  spawn "$dir/etcd.pid" "$dir/etcd.log" etcd --name idem --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "idem=http://127.0.0.1:$peer_port"
  for i in $(seq 150); do
    curl -s -m 1 "http://127.0.0.1:$etcd_port/health" | grep -q '"health":"true"' && break
    [ "$i" = 150 ] && { echo "scripts/patroni: etcd did not start:" >&2; show_logs "$dir/etcd.log" >&2; exit 1; }
    sleep 0.2
  done
  sync_mode=false; [ "$mode" = sync ] && sync_mode=true
  for n in $nodes; do
    cat >"$dir/$n/patroni.yml" <<EOF
scope: idem
namespace: /idem/
name: $n
restapi:
  listen: 127.0.0.1:$(cat "$dir/$n/api.port")
  connect_address: 127.0.0.1:$(cat "$dir/$n/api.port")
etcd3:
  hosts: 127.0.0.1:$etcd_port
bootstrap:
  dcs:
    ttl: 8
    loop_wait: 1
    retry_timeout: 3
    synchronous_mode: $sync_mode
    synchronous_mode_strict: false
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        max_connections: 300
        fsync: 'off'
        full_page_writes: 'on'
        wal_log_hints: 'on'
        synchronous_commit: 'on'
        wal_keep_size: 256MB
        max_wal_senders: 10
        max_replication_slots: 10
  initdb:
  - encoding: UTF8
  - no-locale
  pg_hba:
  - local all all trust
  - host all all 127.0.0.1/32 trust
  - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:$(cat "$dir/$n/pg.port")
  connect_address: 127.0.0.1:$(cat "$dir/$n/pg.port")
  data_dir: $dir/$n/data
  bin_dir: $(cat "$dir/bindir")
  pgpass: $dir/$n/pgpass
  remove_data_directory_on_rewind_failure: true
  remove_data_directory_on_diverged_timelines: true
  authentication:
    superuser:
      username: postgres
    replication:
      username: replicator
  parameters:
    unix_socket_directories: '$dir/$n'
EOF
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir/$n/patroni.yml"
  done
  # node1 first, so it bootstraps the cluster and node2 copies it.
  start_patroni node1
  for i in $(seq 300); do leader >/dev/null && break; sleep 0.2; done
  start_patroni node2
  if [ -n "$watch" ]; then
    # A test process that panics or is killed never runs its cleanup: the
    # cluster must not outlive it.
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 2; done; bash "$2" stop "$3"' \
      watch "$watch" "$self" "$dir" >/dev/null 2>&1 </dev/null &
  fi
  wait_healthy 120 || { show_logs "$dir/etcd.log" "$dir"/node*/patroni.log >&2; exit 1; }
  url
  ;;
url)
  url
  ;;
primary)
  l=$(leader) || { echo "scripts/patroni: no leader" >&2; exit 1; }
  echo "127.0.0.1:$(cat "$dir/$l/pg.port")"
  ;;
wait)
  wait_healthy 120
  ;;
kill-primary)
  started=$SECONDS
  wait_healthy 120
  old=$(leader)
  # Patroni first: it would start its postmaster again.
  kill_pidfile "$dir/$old/patroni.pid"
  kill_postgres "$old"
  killed=$SECONDS
  echo "killed $old (127.0.0.1:$(cat "$dir/$old/pg.port"))"
  until new=$(leader) && [ "$new" != "$old" ]; do
    if [ $((SECONDS - killed)) -ge 60 ]; then
      # No standby was fit to promote: the lost node comes back as the
      # leader, and the command fails.
      start_patroni "$old"
      echo "scripts/patroni: no failover within 60s after $old was lost; see $dir/*/patroni.log" >&2
      exit 1
    fi
    sleep 0.1
  done
  promoted=$((SECONDS - killed))
  start_patroni "$old"
  wait_healthy 120
  echo "killed $old $((killed - started))s after the start; promoted $new after ${promoted}s more; $old a standby again after $((SECONDS - killed))s"
  ;;
stop)
  for n in $nodes; do
    kill_pidfile "$dir/$n/patroni.pid"
    [ -d "$dir/$n" ] && kill_postgres "$n"
  done
  kill_pidfile "$dir/etcd.pid"
  rm -rf "$dir"
  ;;
*)
  echo "$usage" >&2; exit 2
  ;;
esac
