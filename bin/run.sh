#!/usr/bin/env bash
# Run RollMux on one machine. With no configuration: SQLite, in-process tasks, a local Ray.
# With DATABASE_URL / REDIS_URL set: PostgreSQL, a Ray head of its own, and separate Celery
# controller, what-if worker and beat processes.
#
# With Redis the controller never hosts Ray (a crashed controller would take every job's
# actors with it): the Ray head is its own process (`ray start --head --block`), on loopback
# ports of its own (ROLLMUX_RAY_PORT and the seven after it), kept by pid and stopped with
# the app. The controller is restarted if it dies; its jobs' actors and their phase reports
# (waiting in Redis) outlive it.
#   ROLLMUX_PORT (8000)  the web server      ROLLMUX_RAY_PORT (6380)  the Ray head's GCS
#   ROLLMUX_RAY_TEMP_DIR  the Ray head's temp directory (/tmp/rollmux-ray-<ROLLMUX_RAY_PORT>)
#
# Production (ROLLMUX_EMBEDDED=false): DEBUG defaults to false (true only when embedded),
# the static files are collected at every start and served by WhiteNoise, and Django's
# deployment checks run first (`bin/run.sh --check` runs only them). docs/operations.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_AUTH_MODE=disabled
# ROLLMUX_EMBEDDED as settings.py reads it (unset or empty: embedded)
case "$(echo "${ROLLMUX_EMBEDDED:-true}" | tr '[:upper:]' '[:lower:]')" in
  0|false|no|off) embedded="" ;;
  *) embedded=1 ;;
esac
# a researcher who triggers an error in production must never see Django's debug page
if [ -n "$embedded" ]; then export DEBUG=${DEBUG:-true}; else export DEBUG=${DEBUG:-false}; fi
PORT=${ROLLMUX_PORT:-8000}
echo "run.sh: $([ -n "$embedded" ] && echo embedded || echo production), DEBUG=$DEBUG"
if [ -z "$embedded" ]; then
  # production: the deployment checks (HTTPS, cookies, DEBUG, SECRET_KEY), printed at start
  $PY manage.py check --deploy
fi
if [ "${1:-}" = "--check" ]; then
  [ -n "$embedded" ] && $PY manage.py check
  exit 0
fi
if [ "$(echo "$DEBUG" | tr '[:upper:]' '[:lower:]')" != true ]; then
  # without DEBUG, runserver serves no static file: WhiteNoise serves the collected ones
  $PY manage.py collectstatic --noinput -v 0
fi
$PY manage.py migrate --noinput -v 0  # quiet: a first start would list every migration
$PY manage.py seed_demo --if-empty ${ROLLMUX_SEED_ARGS:-}
pids=()
# stop a process: TERM, then KILL if it has not exited within $2 s (a Ray head drains for
# up to 30 s; a controller stuck connecting to a Ray head that never came up ignores TERM)
stop() {
  kill "$1" 2>/dev/null || return 0
  reap "$1" "$2"
}
reap() {  # pid, seconds (TERM already sent)
  for _ in $(seq 1 $(($2 * 2))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.5; done
  echo "run.sh: pid $1 ignored TERM for $2 s; killing it" >&2
  kill -9 "$1" 2>/dev/null || true
}
# the pids of every process a process started in turn (from /proc, by parent: no names)
descendants() {
  local c
  for c in $(pgrep -P "$1" 2>/dev/null); do echo "$c"; descendants "$c"; done
}
cleanup() {
  trap - EXIT INT TERM
  # What the started processes started in turn, found before they stop: a local Ray's
  # raylet leaves its dashboard and runtime-env agents behind when its driver (the embedded
  # web server) dies on TERM, and orphaned they ignore TERM. They are stopped by pid, as
  # everything here: never a machine-wide `ray stop`.
  local kids=()
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kids+=($(descendants "$p")); done
  for p in "${pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]:-}"; do [ -n "$p" ] && reap "$p" 40; done
  for p in "${pids[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
  for k in "${kids[@]:-}"; do [ -n "$k" ] && kill "$k" 2>/dev/null || true; done
  for k in "${kids[@]:-}"; do [ -n "$k" ] && reap "$k" 3; done
}
trap cleanup EXIT INT TERM
if [ -n "${REDIS_URL:-}" ]; then
  RAY_PORT=${ROLLMUX_RAY_PORT:-6380}
  [ "$RAY_PORT" != 6379 ] || { echo "ROLLMUX_RAY_PORT=6379 is Redis's port" >&2; exit 1; }
  # one custom resource node:<name> per inventory node, as the embedded local Ray has
  resources=$(DJANGO_SETTINGS_MODULE=rollmux_web.settings $PY -c 'import json, django; django.setup()
from workers.composition import node_resources; print(json.dumps(node_resources()))')
  export ROLLMUX_RAY_ADDRESS=127.0.0.1:$RAY_PORT
  ray_dir=${ROLLMUX_RAY_TEMP_DIR:-/tmp/rollmux-ray-$RAY_PORT}
  ray_log="${TMPDIR:-/tmp}/rollmux-ray-start-$RAY_PORT.log"
  # The head is up when `ray start` says so ("Ray runtime started"), not when its GCS port
  # answers: on a loaded machine its raylet can still die in start-up (it waits a fixed 15 s
  # for the dashboard agent, ray-project/ray#65983) and `ray start` then exits. Such a start
  # is tried again (3 times); without a Ray head no job would ever run, so run.sh then stops.
  up=""
  for attempt in 1 2 3; do
    : >"$ray_log"
    # (the proxy variables send Ray's cloud-metadata probe to a closed loopback port)
    # RAY_worker_niceness=0: the coordinators' node (workers/ray_env.py CONTROLLER_NODE_ENV)
    RAY_worker_niceness=0 \
    http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 no_proxy=127.0.0.1,localhost,::1 \
      .venv/bin/ray start --head --block --disable-usage-stats --include-dashboard=false \
      --node-ip-address=127.0.0.1 --port="$RAY_PORT" \
      --node-manager-port=$((RAY_PORT + 1)) --object-manager-port=$((RAY_PORT + 2)) \
      --ray-client-server-port=$((RAY_PORT + 3)) --dashboard-agent-grpc-port=$((RAY_PORT + 4)) \
      --dashboard-agent-listen-port=$((RAY_PORT + 5)) --metrics-export-port=$((RAY_PORT + 6)) \
      --runtime-env-agent-port=$((RAY_PORT + 7)) \
      --num-cpus="${ROLLMUX_RAY_CPUS:-2}" --resources="$resources" \
      --temp-dir="$ray_dir" > >(tee -a "$ray_log") 2>&1 & ray_pid=$!
    pids+=("$ray_pid")
    for _ in $(seq 1 360); do  # seconds on a quiet machine, a minute or two on a loaded one
      grep -q "Ray runtime started" "$ray_log" 2>/dev/null && { up=1; break; }
      kill -0 "$ray_pid" 2>/dev/null || break
      sleep 0.5
    done
    [ -n "$up" ] && break
    stop "$ray_pid" 20
    echo "run.sh: the Ray head did not start on 127.0.0.1:$RAY_PORT (attempt $attempt of 3;" \
      "its raylet log: $ray_dir/session_latest/logs/raylet.out)" >&2
    sleep 2
  done
  if [ -z "$up" ]; then
    echo "run.sh: no Ray head, so no job could run; stopping" >&2
    exit 1
  fi
  # the controller: threads pool (one Ray driver per worker process; prefork would start one
  # per child), as many threads as cores (bench/control_plane.py: more threads only add GIL
  # and lock waits to the switch path); restarted when it dies (kill -9 loses nothing)
  (
    trap 'stop "$child" 10; wait "$child" 2>/dev/null; exit 0' TERM INT
    while true; do
      # (no mingle/gossip: nothing here uses them, and mingle waits seconds at start)
      .venv/bin/celery -A rollmux_web worker -n controller@%h -l INFO -P threads \
        -c "${ROLLMUX_WORKER_THREADS:-2}" -Q rollmux-phase,rollmux \
        --without-mingle --without-gossip & child=$!
      wait "$child" || true
      echo "run.sh: the controller exited; starting it again" >&2
      sleep 0.5
    done
  ) & pids+=($!)
  # what-if simulations: their own process, so they never slow the controller down
  .venv/bin/celery -A rollmux_web worker -n sim@%h -l INFO -P solo -Q rollmux-sim \
    --without-mingle --without-gossip & pids+=($!)
  # notification deliveries (SMTP, webhooks and their retries): they wait on other people's
  # servers, so their own process too
  .venv/bin/celery -A rollmux_web worker -n notify@%h -l INFO -P threads \
    -c "${ROLLMUX_NOTIFY_THREADS:-4}" -Q rollmux-notify --without-mingle --without-gossip \
    & pids+=($!)
  .venv/bin/celery -A rollmux_web beat -l INFO -s "${TMPDIR:-/tmp}/rollmux-celerybeat-$PORT" & pids+=($!)
fi
echo "RollMux on http://127.0.0.1:$PORT  (log in as alice / demo-alice, admin / demo-admin)"
$PY manage.py runserver "127.0.0.1:$PORT" --noreload & pids+=($!)
wait "${pids[-1]}"
