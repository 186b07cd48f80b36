#!/usr/bin/env bash
# The tollgate stack on loopback: a private redis-server, the demo S3-like storage backend, the
# control plane and the nginx gateway with tollgate's Lua.
#   stack.sh run    start everything, print the URLs, stop everything on Ctrl-C
#   stack.sh up     start everything in the background; returns once all parts are healthy
#   stack.sh down   stop what `up` started
# Environment (defaults): TOLLGATE_GATEWAY_ADDR (127.0.0.1:8080), TOLLGATE_CP_ADDR
# (127.0.0.1:9090), TOLLGATE_REDIS_ADDR (127.0.0.1:6390), TOLLGATE_BACKEND_ADDR (127.0.0.1:9000),
# TOLLGATE_REDIS_URL (use this existing Redis instead of starting one), TOLLGATE_RUN_DIR (.run),
# TOLLGATE_NODE_ID (gw-local), TOLLGATE_WORKERS (2).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:-run}

GATEWAY_ADDR=${TOLLGATE_GATEWAY_ADDR:-127.0.0.1:8080}
CP_ADDR=${TOLLGATE_CP_ADDR:-127.0.0.1:9090}
REDIS_ADDR=${TOLLGATE_REDIS_ADDR:-127.0.0.1:6390}
BACKEND_ADDR=${TOLLGATE_BACKEND_ADDR:-127.0.0.1:9000}
RUN_DIR=${TOLLGATE_RUN_DIR:-$repo/.run}
NODE_ID=${TOLLGATE_NODE_ID:-gw-local}
WORKERS=${TOLLGATE_WORKERS:-2}
PIDS="$RUN_DIR/pids"

own_redis=1
if [ -n "${TOLLGATE_REDIS_URL:-}" ]; then
    own_redis=0
    REDIS_URL=$TOLLGATE_REDIS_URL
else
    REDIS_URL="redis://$REDIS_ADDR/0"
fi

log() { printf '[tollgate] %s\n' "$*"; }
STARTING=0
die() {
    printf '[tollgate] error: %s\n' "$*" >&2
    [ $STARTING = 1 ] && stop_all
    exit 1
}

wait_for() { # name, command...; polls up to 30 s
    local name=$1; shift
    for _ in $(seq 1 300); do
        if "$@" >/dev/null 2>&1; then log "$name is up"; return 0; fi
        sleep 0.1
    done
    die "$name did not become healthy in 30 s (logs in $RUN_DIR/logs)"
}

port_free() { ! (exec 3<>"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null; }

start_bg() { # name, command...
    local name=$1; shift
    setsid "$@" >>"$RUN_DIR/logs/$name.log" 2>&1 < /dev/null &
    echo "$name $!" >> "$PIDS"
}

stop_all() {
    [ -f "$PIDS" ] || { log "nothing to stop"; return 0; }
    tac "$PIDS" | while read -r name pid; do
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$pid" 2>/dev/null || true
            log "stopped $name ($pid)"
        fi
    done
    rm -f "$PIDS"
}

start_all() {
    if [ -f "$PIDS" ]; then
        while read -r name pid; do
            kill -0 "$pid" 2>/dev/null && die "already running ($name pid $pid); run 'make down' first"
        done < "$PIDS"
        rm -f "$PIDS"
    fi
    mkdir -p "$RUN_DIR/logs" "$RUN_DIR/redis"
    STARTING=1
    for a in "$GATEWAY_ADDR" "$CP_ADDR" "$BACKEND_ADDR"; do
        port_free "$a" || die "$a is already in use (set TOLLGATE_*_ADDR to move it)"
    done
    [ -x "$repo/bin/tollgate-controlplane" ] || die "binaries missing: run 'make build'"

    if [ $own_redis = 1 ]; then
        port_free "$REDIS_ADDR" || die "$REDIS_ADDR is already in use (set TOLLGATE_REDIS_ADDR, or TOLLGATE_REDIS_URL to use that Redis)"
        start_bg redis redis-server --bind "${REDIS_ADDR%:*}" --port "${REDIS_ADDR##*:}" \
            --dir "$RUN_DIR/redis" --save 60 1000 --appendonly no --daemonize no
        wait_for "redis ($REDIS_ADDR)" redis-cli -h "${REDIS_ADDR%:*}" -p "${REDIS_ADDR##*:}" ping
    fi

    TOLLGATE_BACKEND_ADDR=$BACKEND_ADDR start_bg backend "$repo/bin/tollgate-demo-s3"
    wait_for "demo storage backend (http://$BACKEND_ADDR)" curl -sf "http://$BACKEND_ADDR/health"

    TOLLGATE_CP_ADDR=$CP_ADDR TOLLGATE_REDIS_URL=$REDIS_URL \
        start_bg controlplane "$repo/bin/tollgate-controlplane"
    wait_for "control plane (http://$CP_ADDR)" curl -sf "http://$CP_ADDR/health"

    "$repo/scripts/render-gateway.sh" "$RUN_DIR/gateway" "$GATEWAY_ADDR" "$BACKEND_ADDR" \
        "$WORKERS" notice >/dev/null
    TOLLGATE_REDIS_URL=$REDIS_URL TOLLGATE_NODE_ID=$NODE_ID \
        start_bg gateway nginx -p "$RUN_DIR/gateway" -c "$RUN_DIR/gateway/conf/nginx.conf"
    wait_for "gateway (http://$GATEWAY_ADDR)" curl -sf "http://$GATEWAY_ADDR/health"

    STARTING=0
    cat <<TXT

  tollgate is running
    gateway         http://$GATEWAY_ADDR        (send X-App-Id: demo-p0 … demo-p3)
    gateway metrics http://$GATEWAY_ADDR/metrics
    control plane   http://$CP_ADDR/health
    storage backend http://$BACKEND_ADDR
    redis           $REDIS_URL
    logs            $RUN_DIR/logs

  try: curl -i -H 'X-App-Id: demo-p1' -T README.md http://$GATEWAY_ADDR/bucket/readme
TXT
}

case $cmd in
    up) start_all ;;
    down) stop_all ;;
    run)
        trap 'echo; stop_all; exit 0' INT TERM
        start_all
        echo "  Ctrl-C stops everything."
        while true; do
            while read -r name pid; do
                kill -0 "$pid" 2>/dev/null || { log "$name exited (see $RUN_DIR/logs/$name.log)"; stop_all; exit 1; }
            done < "$PIDS"
            sleep 1
        done
        ;;
    *) die "usage: $0 run|up|down" ;;
esac
