# The helpers the test-server scripts share (internal/testpg/pg.bash,
# internal/testpgbouncer/pgbouncer.bash, internal/testrabbit/rabbitmq.bash,
# internal/testpatroni/patroni.bash). A script sources this file from beside
# itself, where its Go package writes it with the script (the tests need no
# source tree), or from internal/testserver/ when run from the repository
# (scripts/pg and friends):
#
#   testserver_lib=$(dirname "${BASH_SOURCE[0]}")/testserver.bash
#   [ -f "$testserver_lib" ] || testserver_lib=$(dirname "${BASH_SOURCE[0]}")/../testserver/testserver.bash
#   source "$testserver_lib"
#
# It defines functions only and sets nothing: the script keeps its own
# options (set -euo pipefail).

# free_port picks a free loopback port below the kernel's ephemeral range
# (ip_local_port_range). A port the kernel chose would be its to give again:
# while the server is down (pause, restart) an outgoing connection can get
# it as its local port, and the server cannot listen on it again ("could
# not bind ... Address already in use").
#
# A port is free when picked but bound only when its server starts, which
# can be seconds later (Patroni's second node starts once the first
# leads), while other scripts pick ports in parallel. So each pick is
# also reserved, as a directory made atomically under
# $TMPDIR/idem-ports-UID, and no other pick takes a port reserved in the
# last ten minutes; the bind test covers the servers that run longer.
# Debian's python3 first: it starts in a quarter of the time of a shim
# (pyenv's) found earlier on PATH.
free_port() {
  local py=python3
  [ -x /usr/bin/python3 ] && py=/usr/bin/python3
  "$py" - <<'PY' 2>/dev/null || echo $((20000 + RANDOM % 10000))
import os, random, socket, tempfile, time
with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
    low = int(f.read().split()[0])
reserved = os.path.join(tempfile.gettempdir(), "idem-ports-%d" % os.getuid())
os.makedirs(reserved, mode=0o700, exist_ok=True)
for name in os.listdir(reserved):
    try:
        if time.time() - os.path.getmtime(os.path.join(reserved, name)) > 600:
            os.rmdir(os.path.join(reserved, name))
    except OSError:
        pass  # another pick removed it first
for _ in range(200):
    port = random.randrange(max(1024, low - 12000), low)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    try:
        os.mkdir(os.path.join(reserved, str(port)))
    except FileExistsError:
        continue
    print(port)
    break
else:
    raise SystemExit(1)
PY
}

# as_owner runs a command as the postgres user when we are root (PostgreSQL
# and PgBouncer refuse root), as ourselves otherwise.
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# pg_bindir prints the directory of PostgreSQL's server binaries (initdb,
# postgres, pg_ctl): pg_config's, else the newest of Debian's
# /usr/lib/postgresql/*/bin, else initdb's on PATH; it fails when there is
# none.
pg_bindir() {
  if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then
    pg_config --bindir; return
  fi
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$d/initdb" ] && { echo "$d"; return; }
  done
  if command -v initdb >/dev/null 2>&1; then dirname "$(command -v initdb)"; return; fi
  return 1
}

# install_packages TOOL WHAT NO_INSTALL_VAR PACKAGE... installs Debian
# packages for scripts/TOOL, which found WHAT missing: never when the
# variable NO_INSTALL_VAR is set (the tests set it: test code installs
# nothing) or when we are not root, where it exits 1 saying what to
# install. Debian's policy-rc.d (in containers) or a stopped service
# manager keeps the packages from starting the system's own servers; if
# they did start, they use the default ports and names, which the test
# servers never use.
install_packages() {
  local tool=$1 what=$2 var=$3; shift 3
  if [ -n "${!var:-}" ]; then
    echo "scripts/$tool: $what is not installed: install it (Debian: apt-get install $*)" >&2
    exit 1
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "scripts/$tool: $what is not installed and we are not root: install Debian's packages $*" >&2
    exit 1
  fi
  echo "scripts/$tool: installing $what with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >&2
}
