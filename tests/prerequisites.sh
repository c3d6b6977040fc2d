#!/usr/bin/env sh
# What the test suite needs besides the Python packages, checked before pytest starts
# (`make test` and .ci/run call this): the fault tests start servers of their own
# (redis-server on a free port; a PostgreSQL cluster made with initdb and run by pg_ctl
# as the postgres user through runuser), the process tests read `ps`, and the browser
# tests (the status page, the Flower screenshot) drive the system's Chromium, never a
# downloaded one. As root with apt-get, what is missing is installed; otherwise one line
# names the packages to install and the command fails. With --packages only the packages
# are seen to (.ci/run starts the servers afterwards).
set -eu

missing=""
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$missing postgresql"
command -v runuser >/dev/null 2>&1 || missing="$missing util-linux"
command -v ps >/dev/null 2>&1 || missing="$missing procps"
test -x /usr/bin/chromium || missing="$missing chromium"

if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "[prerequisites] installing$missing"
        apt-get update -qq
        # shellcheck disable=SC2086 # one word per package
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
    else
        echo "[prerequisites] make test needs the Debian packages:$missing (apt-get install$missing, as root)" >&2
        exit 1
    fi
fi

[ "${1:-}" = "--packages" ] && exit 0

# The two servers every run shares (tests/conftest.py gives each session a database and a
# Redis db number of its own on them): started by hand or by .ci/run, never by the tests.
python=${PYTHON:-python3}
"$python" - <<'PY'
import os, socket, sys
from urllib.parse import urlsplit

pg = urlsplit(os.environ.get("TOOLSAFE_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres"))
servers = {
    "Redis": (os.environ.get("TOOLSAFE_TEST_REDIS_HOST", "127.0.0.1"),
              int(os.environ.get("TOOLSAFE_TEST_REDIS_PORT", "6379"))),
    "PostgreSQL": (pg.hostname or "127.0.0.1", pg.port or 5432),
}
down = []
for name, address in servers.items():
    try:
        socket.create_connection(address, timeout=3).close()
    except OSError:
        down.append(f"{name} on {address[0]}:{address[1]}")
if down:
    print(f"[prerequisites] make test needs {' and '.join(down)} running (README, 'The two commands')", file=sys.stderr)
    sys.exit(1)
PY
