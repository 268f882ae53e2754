#!/usr/bin/env bash
# Run RollMux on one machine. With no configuration: SQLite, in-process tasks, a local Ray.
# With DATABASE_URL / REDIS_URL set: PostgreSQL, and separate Celery worker and beat processes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_AUTH_MODE=disabled
export DEBUG=${DEBUG:-true}
$PY manage.py migrate --noinput
$PY manage.py seed_demo --if-empty
pids=()
cleanup() { for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
if [ -n "${REDIS_URL:-}" ]; then
  # the controller: threads pool (one Ray driver per worker process; prefork would start one
  # per child), as many threads as cores (bench/control_plane.py: more threads only add GIL
  # and lock waits to the switch path)
  .venv/bin/celery -A rollmux_web worker -n controller@%h -l INFO -P threads \
    -c "${ROLLMUX_WORKER_THREADS:-2}" -Q rollmux & pids+=($!)
  # what-if simulations: their own process, so they never slow the controller down
  .venv/bin/celery -A rollmux_web worker -n sim@%h -l INFO -P solo -Q rollmux-sim & pids+=($!)
  # notification deliveries (mail servers, webhooks): off the controller's queue too
  .venv/bin/celery -A rollmux_web worker -n notify@%h -l INFO -P threads -c 4 -Q rollmux-notify & pids+=($!)
  .venv/bin/celery -A rollmux_web beat -l INFO -s "${TMPDIR:-/tmp}/rollmux-celerybeat" & pids+=($!)
fi
echo "RollMux on http://127.0.0.1:8000  (log in as alice / demo-alice, admin / demo-admin)"
$PY manage.py runserver 127.0.0.1:8000 --noreload
