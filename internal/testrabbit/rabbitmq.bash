#!/usr/bin/env bash
# Starts and stops a throwaway RabbitMQ node for tests and benchmarks.
# scripts/rabbitmq runs this file; internal/testrabbit embeds it and writes
# it beside the nodes it starts, so the tests need no source tree to find it.
#
#   scripts/rabbitmq install           install RabbitMQ when it is missing
#   scripts/rabbitmq start DIR [--tls CERT KEY CA] [--watch PID]
#                                      start a private node with its data in
#                                      DIR, on free loopback ports; print its
#                                      amqp:// URL. With --tls, the node also
#                                      listens for TLS on a free loopback port
#                                      with server certificate CERT and key
#                                      KEY (PEM files; CA is the chain's CA;
#                                      client certificates are not asked
#                                      for), and an amqps:// URL is printed
#                                      on a second line. With --watch, the
#                                      node is stopped (and DIR removed) once
#                                      process PID is gone, even if it never
#                                      said so
#   scripts/rabbitmq stop DIR          stop it and remove DIR
#   scripts/rabbitmq restart DIR       kill it (SIGKILL: no clean shutdown)
#                                      and start it again on the same ports
#                                      with the same data
#
# The node is private: its own name (idem-PORT@localhost), AMQP port,
# distribution port and epmd port (so it never meets the system's node or
# another test's), its own Erlang cookie (HOME is DIR), configuration,
# plugins list (none), logs and Mnesia directory, all under DIR. It never
# starts or touches the system's rabbitmq-server service. Debian's package
# is installed first when missing and we are root, unless
# IDEM_RABBITMQ_NO_INSTALL is set (as the tests set it: they never
# install). The node runs as the calling user.
set -euo pipefail

# The shared helpers (free_port, as_owner, install_packages): beside this
# file where a test wrote both, in internal/testserver/ in the repository.
testserver_lib=$(dirname "${BASH_SOURCE[0]}")/testserver.bash
[ -f "$testserver_lib" ] || testserver_lib=$(dirname "${BASH_SOURCE[0]}")/../testserver/testserver.bash
# shellcheck source=../testserver/testserver.bash
source "$testserver_lib"

sbin=/usr/lib/rabbitmq/bin

install_rabbitmq() { install_packages rabbitmq 'RabbitMQ' IDEM_RABBITMQ_NO_INSTALL rabbitmq-server; }

installed() { [ -x "$sbin/rabbitmq-server" ] && command -v epmd >/dev/null 2>&1; }

# node_env exports the node's private environment, kept in DIR/env.
node_env() {
  # shellcheck disable=SC1091
  source "$dir/env"
  export HOME RABBITMQ_NODENAME RABBITMQ_NODE_IP_ADDRESS RABBITMQ_NODE_PORT RABBITMQ_DIST_PORT \
    ERL_EPMD_PORT ERL_EPMD_ADDRESS RABBITMQ_MNESIA_BASE RABBITMQ_LOG_BASE RABBITMQ_CONFIG_FILE \
    RABBITMQ_ADVANCED_CONFIG_FILE RABBITMQ_CONF_ENV_FILE RABBITMQ_ENABLED_PLUGINS_FILE \
    RABBITMQ_PID_FILE RABBITMQ_PLUGINS_EXPAND_DIR RABBITMQ_GENERATED_CONFIG_DIR \
    RABBITMQ_SCHEMA_DIR RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS
}

# start_node starts the node and waits for it; it fails, saying why on
# stderr, when the node does not come up.
start_node() {
  node_env
  setsid "$sbin/rabbitmq-server" >"$dir/log/stdout.log" 2>&1 </dev/null &
  if ! timeout 120 "$sbin/rabbitmqctl" -q wait --timeout 110 "$RABBITMQ_PID_FILE" >"$dir/log/wait.log" 2>&1; then
    cat "$dir/log/wait.log" "$dir/log/stdout.log" >&2 || true
    return 1
  fi
}

kill_node() {
  node_env
  if [ -f "$RABBITMQ_PID_FILE" ]; then
    kill -9 "$(cat "$RABBITMQ_PID_FILE")" 2>/dev/null || true
    while kill -0 "$(cat "$RABBITMQ_PID_FILE")" 2>/dev/null; do sleep 0.1; done
    rm -f "$RABBITMQ_PID_FILE"
  fi
}

# configure picks the node's free ports and writes its environment and
# configuration into DIR.
configure() {
  port=$(free_port); dist=$(free_port); epmd=$(free_port)
  cat >"$dir/env" <<ENV
HOME='$dir'
RABBITMQ_NODENAME='idem-$port@localhost'
RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
RABBITMQ_NODE_PORT=$port
RABBITMQ_DIST_PORT=$dist
ERL_EPMD_PORT=$epmd
ERL_EPMD_ADDRESS=127.0.0.1
RABBITMQ_MNESIA_BASE='$dir/mnesia'
RABBITMQ_LOG_BASE='$dir/log'
RABBITMQ_CONFIG_FILE='$dir/rabbitmq.conf'
RABBITMQ_ADVANCED_CONFIG_FILE='$dir/advanced.config'
RABBITMQ_CONF_ENV_FILE='$dir/rabbitmq-env.conf'
RABBITMQ_ENABLED_PLUGINS_FILE='$dir/enabled_plugins'
RABBITMQ_PID_FILE='$dir/rabbitmq.pid'
RABBITMQ_PLUGINS_EXPAND_DIR='$dir/plugins-expand'
RABBITMQ_GENERATED_CONFIG_DIR='$dir/generated'
RABBITMQ_SCHEMA_DIR='$dir/generated'
RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS='+S 2:2 +sbwt none +sbwtdcpu none +sbwtdio none -kernel inet_dist_use_interface {127,0,0,1}'
ENV
  : >"$dir/rabbitmq-env.conf"
  echo "[]." >"$dir/enabled_plugins"
  echo "[]." >"$dir/advanced.config"
  {
    echo "log.console = false"
    echo "log.file.level = warning"
    echo "disk_free_limit.absolute = 50MB"
    if [ -n "$tls_cert" ]; then
      tls_port=$(free_port)
      # One-way TLS: the server proves itself; clients log in with a
      # password (verify_none: no client certificate is asked for).
      echo "listeners.ssl.default = 127.0.0.1:$tls_port"
      echo "ssl_options.cacertfile = $tls_ca"
      echo "ssl_options.certfile = $tls_cert"
      echo "ssl_options.keyfile = $tls_key"
      echo "ssl_options.verify = verify_none"
      echo "ssl_options.fail_if_no_peer_cert = false"
    fi
  } >"$dir/rabbitmq.conf"
}

cmd=${1:-}; dir=${2:-}
tls_cert=; tls_key=; tls_ca=; watch=
if [ "$cmd" = start ] && [ $# -gt 2 ]; then
  set -- "${@:3}"
  while [ $# -gt 0 ]; do
    case "$1" in
    --tls) [ $# -ge 4 ] || { echo "scripts/rabbitmq: --tls CERT KEY CA" >&2; exit 2; }
      tls_cert=$(realpath "$2"); tls_key=$(realpath "$3"); tls_ca=$(realpath "$4"); shift 4 ;;
    --watch) [ $# -ge 2 ] || { echo "scripts/rabbitmq: --watch PID" >&2; exit 2; }
      watch=$2; shift 2 ;;
    *) echo "scripts/rabbitmq: unknown option $1" >&2; exit 2 ;;
    esac
  done
fi
if [ "$cmd" = install ]; then
  installed || install_rabbitmq
  exit 0
fi
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: scripts/rabbitmq install|start|stop|restart DIR" >&2; exit 2; }

case "$cmd" in
start)
  installed || install_rabbitmq
  mkdir -p "$dir/log" "$dir/mnesia" "$dir/generated" "$dir/plugins-expand"
  dir=$(cd "$dir" && pwd)
  # A free port can be taken by another test's server before the node
  # listens on it: then the node fails with eaddrinuse, and is started again
  # on other ports.
  for attempt in 1 2 3; do
    configure
    if start_node 2>"$dir/log/start.err"; then
      break
    fi
    kill_node
    epmd -port "$ERL_EPMD_PORT" -kill >/dev/null 2>&1 || true
    if [ "$attempt" = 3 ] || ! grep -q eaddrinuse "$dir/log/start.err"; then
      cat "$dir/log/start.err" >&2
      exit 1
    fi
  done
  if [ -n "$watch" ]; then
    # A test process that panics or is killed never runs its cleanup: the
    # node must not outlive it.
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 2; done; bash "$2" stop "$3"' \
      watch "$watch" "${BASH_SOURCE[0]}" "$dir" >/dev/null 2>&1 </dev/null &
  fi
  echo "amqp://guest:guest@127.0.0.1:$port/"
  if [ -n "$tls_cert" ]; then
    echo "amqps://guest:guest@127.0.0.1:$tls_port/"
  fi
  ;;
restart)
  kill_node
  start_node || exit 1
  ;;
stop)
  if [ -f "$dir/env" ]; then
    kill_node
    epmd -port "$ERL_EPMD_PORT" -kill >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
  ;;
*)
  echo "usage: scripts/rabbitmq install|start|stop|restart DIR" >&2; exit 2
  ;;
esac
