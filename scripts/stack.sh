#!/usr/bin/env bash
# The tollgate stack on loopback: a private redis-server, the S3 storage backend (versitygw,
# or the in-memory demo backend with its failure switch), the control plane, the nginx gateway with tollgate's Lua, and (when installed) a private Prometheus
# scraping the gateway and the control plane, which answers the console's history ranges.
#   stack.sh run    start everything, print the URLs, stop everything on Ctrl-C
#   stack.sh up     start everything in the background; returns once all parts are healthy
#   stack.sh down   stop what `up` started
#   stack.sh prometheus-config   only write $RUN_DIR/prometheus/prometheus.yml (what run/up use)
# Environment (defaults): TOLLGATE_GATEWAY_ADDR (127.0.0.1:8080), TOLLGATE_CP_ADDR
# (127.0.0.1:9090), TOLLGATE_REDIS_ADDR (127.0.0.1:6390), TOLLGATE_BACKEND_ADDR (127.0.0.1:9000),
# TOLLGATE_BACKEND (versitygw: the S3 server of bin/versitygw, objects under $RUN_DIR/backend;
# demo: the in-memory demo backend, whose failure switch the breaker demos use),
# TOLLGATE_BACKEND_ADMIN_ADDR (127.0.0.1:9001: the demo backend's failure switch, loopback only),
# TOLLGATE_DEMO_CREDENTIALS (AKID:SECRET,… the backend accepts besides versitygw's generated
# root key; unset: none),
# TOLLGATE_REDIS_URL (use this existing Redis instead of starting one), TOLLGATE_RUN_DIR (.run),
# TOLLGATE_NODE_ID (gw-local), TOLLGATE_WORKERS (2), TOLLGATE_PROMETHEUS_ADDR (127.0.0.1:9091),
# TOLLGATE_METRICS_TOKEN (generated: the bearer token Prometheus scrapes the control plane with),
# TOLLGATE_METRICS_ADDR (127.0.0.1:9145: the gateway's /health and /metrics, apart from the
# tenants' listener), TOLLGATE_METRICS_ALLOW (who may read them; render-gateway.sh),
# TOLLGATE_BIN_DIR (bin: where the control plane, demo backend and versitygw binaries are),
# TOLLGATE_SECRETS_KEY_FILE ($RUN_DIR/secrets.key, generated 0600: seals access key secrets).
# Secrets (docs/security.md): the run directory is 0700 and what the stack writes there 0600
# (umask 077); the private Redis wants a generated password and has a gateway user limited to
# the gateway's keys and commands (deploy/redis/gateway.acl), both kept in 0600 files under
# $RUN_DIR/redis and handed over in TOLLGATE_REDIS_URL (the environment, never a command line);
# a generated admin password goes to the terminal only.
set -euo pipefail
umask 077
repo=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:-run}

GATEWAY_ADDR=${TOLLGATE_GATEWAY_ADDR:-127.0.0.1:8080}
CP_ADDR=${TOLLGATE_CP_ADDR:-127.0.0.1:9090}
REDIS_ADDR=${TOLLGATE_REDIS_ADDR:-127.0.0.1:6390}
BACKEND_ADDR=${TOLLGATE_BACKEND_ADDR:-127.0.0.1:9000}
BACKEND_ADMIN_ADDR=${TOLLGATE_BACKEND_ADMIN_ADDR:-127.0.0.1:9001}
BACKEND=${TOLLGATE_BACKEND:-versitygw}
RUN_DIR=${TOLLGATE_RUN_DIR:-$repo/.run}
NODE_ID=${TOLLGATE_NODE_ID:-gw-local}
WORKERS=${TOLLGATE_WORKERS:-2}
PROM_ADDR=${TOLLGATE_PROMETHEUS_ADDR:-127.0.0.1:9091}
METRICS_ADDR=${TOLLGATE_METRICS_ADDR:-127.0.0.1:9145}
BIN_DIR=${TOLLGATE_BIN_DIR:-$repo/bin}
PROM_BIN=$(command -v prometheus || true)
PIDS="$RUN_DIR/pids"

own_redis=1
GATEWAY_REDIS_URL=""
if [ -n "${TOLLGATE_REDIS_URL:-}" ]; then
    own_redis=0
    REDIS_URL=$TOLLGATE_REDIS_URL
    REDIS_SHOWN=$REDIS_URL
    case $REDIS_URL in *@*) REDIS_SHOWN="${REDIS_URL%%://*}://…@${REDIS_URL##*@}" ;; esac
    GATEWAY_REDIS_URL=$REDIS_URL
else
    REDIS_URL=""                 # redis_secrets() sets it (and GATEWAY_REDIS_URL)
    REDIS_SHOWN="redis://$REDIS_ADDR/0 (passwords in $RUN_DIR/redis/*.password)"
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
    if [ -f "$RUN_DIR/gateway-tmp" ]; then
        local d
        d=$(cat "$RUN_DIR/gateway-tmp")
        case $d in */tollgate-gateway.*) rm -rf -- "$d" ;; esac
        rm -f "$RUN_DIR/gateway-tmp"
    fi
}

# The private Redis' secrets: a password for the default user (the control plane) and one for
# tollgate-gateway, generated once into 0600 files; auth.conf (0600, rewritten at every start)
# is included by redis-server's command line, which names the file, never a password.
gen_secret() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
redis_secrets() {
    local d="$RUN_DIR/redis" pw gw
    [ -s "$d/default.password" ] || gen_secret > "$d/default.password"
    [ -s "$d/gateway.password" ] || gen_secret > "$d/gateway.password"
    pw=$(cat "$d/default.password") gw=$(cat "$d/gateway.password")
    cat > "$d/auth.conf" <<CONF
# generated by scripts/stack.sh
user default on >$pw ~* &* +@all
user tollgate-gateway on >$gw $(cat "$repo/deploy/redis/gateway.acl")
CONF
    REDIS_URL="redis://:$pw@$REDIS_ADDR/0"
    GATEWAY_REDIS_URL="redis://tollgate-gateway:$gw@$REDIS_ADDR/0"
}

# The secrets key file: seals the S3 secret access keys the gateway verifies signatures with
# (docs/security.md); generated once, 0600, read by the control plane and the gateway's master.
SECRETS_KEY_FILE=${TOLLGATE_SECRETS_KEY_FILE:-$RUN_DIR/secrets.key}
secrets_key() {
    [ -s "$SECRETS_KEY_FILE" ] && return 0
    { echo "# tollgate secrets key (AES-256), generated by scripts/stack.sh; keep it 0600"
      head -c 32 /dev/urandom | base64; } > "$SECRETS_KEY_FILE"
    chmod 600 "$SECRETS_KEY_FILE"
}

# The metrics token lets Prometheus scrape the control plane's /metrics (which otherwise wants a
# user's token); kept in a file Prometheus reads, never on a command line.
METRICS_TOKEN=${TOLLGATE_METRICS_TOKEN:-}
write_prometheus_config() {
    mkdir -p "$RUN_DIR/prometheus"
    [ -n "$METRICS_TOKEN" ] || METRICS_TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
    (umask 077; printf '%s' "$METRICS_TOKEN" > "$RUN_DIR/prometheus/metrics-token")
    cat > "$RUN_DIR/prometheus/prometheus.yml" <<YML
# generated by scripts/stack.sh
global: {scrape_interval: 5s, evaluation_interval: 5s}
rule_files: ['$repo/deploy/prometheus/tollgate-alerts.yml']
scrape_configs:
  - job_name: gateway
    static_configs: [{targets: ['$METRICS_ADDR']}]
  - job_name: controlplane
    authorization: {type: Bearer, credentials_file: '$RUN_DIR/prometheus/metrics-token'}
    static_configs: [{targets: ['$CP_ADDR']}]
YML
}

start_all() {
    if [ -f "$PIDS" ]; then
        while read -r name pid; do
            kill -0 "$pid" 2>/dev/null && die "already running ($name pid $pid); run 'make down' first"
        done < "$PIDS"
        rm -f "$PIDS"
    fi
    mkdir -p "$RUN_DIR/logs" "$RUN_DIR/redis"
    # a run directory of an older stack.sh may hold world-readable secrets (logs, dump.rdb)
    chmod -R go-rwx "$RUN_DIR"
    STARTING=1
    local backend_addrs=("$BACKEND_ADDR")
    [ "$BACKEND" = demo ] && backend_addrs+=("$BACKEND_ADMIN_ADDR")
    for a in "$GATEWAY_ADDR" "$METRICS_ADDR" "$CP_ADDR" "${backend_addrs[@]}"; do
        port_free "$a" || die "$a is already in use (set TOLLGATE_*_ADDR to move it)"
    done
    [ -x "$BIN_DIR/tollgate-controlplane" ] || die "binaries missing: run 'make build'"
    local prom_url="" prom_note="absent (install Debian's prometheus for the console's history)"
    if [ -n "$PROM_BIN" ]; then
        port_free "$PROM_ADDR" || die "$PROM_ADDR is already in use (set TOLLGATE_PROMETHEUS_ADDR to move it)"
        prom_url="http://$PROM_ADDR"
        prom_note=$prom_url
        write_prometheus_config
    else
        log "prometheus is not installed: the console's 1h/6h/24h/7d history will say Prometheus is absent"
    fi

    if [ $own_redis = 1 ]; then
        port_free "$REDIS_ADDR" || die "$REDIS_ADDR is already in use (set TOLLGATE_REDIS_ADDR, or TOLLGATE_REDIS_URL to use that Redis)"
        redis_secrets
        # AOF: every acknowledged write is in the file before the reply (docs/durability.md)
        start_bg redis redis-server --bind "${REDIS_ADDR%:*}" --port "${REDIS_ADDR##*:}" \
            --dir "$RUN_DIR/redis" --appendonly yes --appendfsync "${TOLLGATE_REDIS_APPENDFSYNC:-everysec}" \
            --save 60 1000 --daemonize no --include "$RUN_DIR/redis/auth.conf"
        wait_for "redis ($REDIS_ADDR)" redis_ping
    fi

    start_backend

    secrets_key
    # a first run's generated admin password: to this 0600 file, shown below, then deleted
    local admin_pw_file="$RUN_DIR/admin-password"
    rm -f "$admin_pw_file"
    TOLLGATE_CP_ADDR=$CP_ADDR TOLLGATE_REDIS_URL=$REDIS_URL TOLLGATE_PROMETHEUS_URL=$prom_url \
        TOLLGATE_METRICS_TOKEN=$METRICS_TOKEN TOLLGATE_ADMIN_PASSWORD_FILE=$admin_pw_file \
        TOLLGATE_SEED_DEMO=${TOLLGATE_SEED_DEMO:-true} TOLLGATE_RUN_DIR=$RUN_DIR \
        TOLLGATE_SECRETS_KEY_FILE=$SECRETS_KEY_FILE start_bg controlplane "$BIN_DIR/tollgate-controlplane"
    wait_for "control plane (http://$CP_ADDR)" curl -sf "http://$CP_ADDR/health"

    gateway_tmp
    TOLLGATE_METRICS_ADDR=$METRICS_ADDR TOLLGATE_GATEWAY_TMP=$GATEWAY_TMP \
        "$repo/scripts/render-gateway.sh" "$RUN_DIR/gateway" \
        "$GATEWAY_ADDR" "$BACKEND_ADDR" "$WORKERS" notice >/dev/null
    # virtual-hosted S3 addressing: http://<bucket>.s3.localhost:<port>/<key>
    TOLLGATE_REDIS_URL=$GATEWAY_REDIS_URL TOLLGATE_NODE_ID=$NODE_ID \
        TOLLGATE_SECRETS_KEY_FILE=$SECRETS_KEY_FILE TOLLGATE_S3_DOMAINS=${TOLLGATE_S3_DOMAINS:-s3.localhost} \
        start_bg gateway nginx -p "$RUN_DIR/gateway" -c "$RUN_DIR/gateway/conf/nginx.conf"
    wait_for "gateway (http://$GATEWAY_ADDR)" curl -sf "http://$METRICS_ADDR/health"

    if [ -n "$prom_url" ]; then
        start_bg prometheus "$PROM_BIN" --config.file="$RUN_DIR/prometheus/prometheus.yml" \
            --storage.tsdb.path="$RUN_DIR/prometheus/data" --storage.tsdb.retention.time=8d \
            --web.listen-address="$PROM_ADDR"
        wait_for "prometheus ($prom_url)" curl -sf "$prom_url/-/ready"
    fi

    STARTING=0
    cat <<TXT

  tollgate is running
    gateway         http://$GATEWAY_ADDR        (send X-App-Id: demo-p0 … demo-p3)
    gateway metrics http://$METRICS_ADDR/metrics   (and /health)
    console + API   http://$CP_ADDR/        (user admin; health: /health)
    storage backend http://$BACKEND_ADDR   ($BACKEND_NOTE)
    redis           $REDIS_SHOWN
    prometheus      $prom_note
    logs            $RUN_DIR/logs

  try: curl -i -H 'X-App-Id: demo-p1' -T README.md http://$GATEWAY_ADDR/bucket/readme
TXT
    # a first run on an empty Redis generates the admin password: show it to whoever started
    # us (the terminal only), then delete it
    if [ -f "$admin_pw_file" ]; then
        cat "$admin_pw_file"
        rm -f "$admin_pw_file"
    fi
}

# The storage backend (docs/operations.md, "The storage backend").
# versitygw: a production S3 server (SigV4 signatures, ACLs, versioning) with its posix backend:
# objects are files under $RUN_DIR/backend/data. Its root key pair is generated once into 0600
# files and handed over in the environment; TOLLGATE_DEMO_CREDENTIALS become accounts that may
# create buckets (users.json, 0600, rewritten at every start). The bucket "bucket" is created
# public-read-write, so that the README's unsigned requests with an X-App-Id header work.
# demo: the in-memory demo backend with the failure switch on $BACKEND_ADMIN_ADDR.
BACKEND_NOTE=""
start_backend() {
    case $BACKEND in
        demo)
            TOLLGATE_BACKEND_ADDR=$BACKEND_ADDR TOLLGATE_BACKEND_ADMIN_ADDR=$BACKEND_ADMIN_ADDR \
                start_bg backend "$BIN_DIR/tollgate-demo-s3"
            wait_for "demo storage backend (http://$BACKEND_ADDR)" curl -sf "http://$BACKEND_ADDR/health"
            BACKEND_NOTE="demo backend; failure switch: http://$BACKEND_ADMIN_ADDR/_demo/fail"
            ;;
        versitygw) start_versitygw ;;
        *) die "TOLLGATE_BACKEND must be versitygw or demo, not '$BACKEND'" ;;
    esac
}

start_versitygw() {
    local d="$RUN_DIR/backend" vgw="$BIN_DIR/versitygw"
    [ -x "$vgw" ] || die "$vgw missing: run 'make build' (scripts/build-backend.sh builds it)"
    mkdir -p "$d/data" "$d/iam" "$d/versions"
    [ -s "$d/root.access-key" ] || printf 'ROOT%s' "$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F)" > "$d/root.access-key"
    [ -s "$d/root.secret-key" ] || gen_secret > "$d/root.secret-key"
    local root_key root_secret accounts="" entry k v
    root_key=$(cat "$d/root.access-key") root_secret=$(cat "$d/root.secret-key")
    if [ -n "${TOLLGATE_DEMO_CREDENTIALS:-}" ]; then
        IFS=',' read -ra entries <<< "$TOLLGATE_DEMO_CREDENTIALS"
        for entry in "${entries[@]}"; do
            k=${entry%%:*} v=${entry#*:}
            # printable ASCII without space, quote or backslash (users.json is written as is)
            case $entry in *:*) ;; *) k="" ;; esac
            case "$k$v" in *[!\!-~]*|*\"*|*\\*) k="" ;; esac
            [ -n "$k" ] && [ -n "$v" ] && [ "${k#*/}" = "$k" ] ||
                die "TOLLGATE_DEMO_CREDENTIALS: an entry is not AKID:SECRET (printable ASCII, no space, quote, backslash; no / in the key)"
            accounts+="${accounts:+,}\"$k\":{\"access\":\"$k\",\"secret\":\"$v\",\"role\":\"userplus\"}"
        done
    fi
    printf '{"accessAccounts":{%s}}\n' "$accounts" > "$d/iam/users.json"
    local domain=${TOLLGATE_S3_DOMAINS:-s3.localhost}
    ROOT_ACCESS_KEY_ID=$root_key ROOT_SECRET_ACCESS_KEY=$root_secret VGW_PORT=$BACKEND_ADDR \
        VGW_IAM_DIR="$d/iam" VGW_VERSIONING_DIR="$d/versions" VGW_HEALTH=/_health \
        VGW_VIRTUAL_DOMAIN=${domain%%,*} VGW_DIR_PERMS=0700 VGW_FILE_PERMS=0600 \
        start_bg backend "$vgw" --quiet posix "$d/data"
    wait_for "storage backend versitygw (http://$BACKEND_ADDR)" curl -sf "http://$BACKEND_ADDR/_health"
    # the demo bucket, public-read-write (created once; 409 BucketAlreadyOwnedByYou afterwards)
    local code
    # (the key pair reaches curl on its standard input, never on its command line)
    code=$(printf 'user = "%s:%s"\n' "$root_key" "$root_secret" | curl -s -K - -o /dev/null -w '%{http_code}' \
        --aws-sigv4 "aws:amz:us-east-1:s3" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
        -H 'x-amz-acl: public-read-write' -H 'x-amz-object-ownership: BucketOwnerPreferred' \
        -X PUT "http://$BACKEND_ADDR/bucket") || true
    case $code in 200|409) ;; *) die "versitygw refused to create the demo bucket (HTTP $code; logs in $RUN_DIR/logs)" ;; esac
    BACKEND_NOTE="versitygw; root key in $d/root.*-key"
}

# The gateway's temporary files (a DeleteObjects or browser-form body nginx keeps while it is
# read; nothing else is buffered to disk). A root master runs its workers as nobody, who must
# reach them: search permission on the run directory's path (no listing; the secrets are 0600
# in 0700 directories), and nginx creates the directories in tmp owned by nobody, 0700. A run
# directory nobody cannot reach (a checkout in a 0700 home, as /root is) gets its temporary
# files in a fresh private directory under ${TMPDIR:-/tmp} instead, removed by `down`.
GATEWAY_TMP=""
gateway_tmp() {
    local gw="$RUN_DIR/gateway"
    GATEWAY_TMP="$gw/tmp"
    mkdir -p "$gw/tmp"
    [ "$(id -u)" = 0 ] || return 0
    chmod 711 "$RUN_DIR" "$gw" "$gw/tmp"
    mkdir -p "$gw/lua" && chmod 711 "$gw/lua"
    local worker
    worker=$(id -un nobody 2>/dev/null) || die "user nobody is missing (nginx runs its workers as nobody)"
    if ! runuser -u "$worker" -- test -x "$gw/tmp" 2>/dev/null; then
        GATEWAY_TMP=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-gateway.XXXXXX")
        chmod 711 "$GATEWAY_TMP"
        echo "$GATEWAY_TMP" > "$RUN_DIR/gateway-tmp"
        log "$RUN_DIR is out of reach of nginx's workers ($worker): their temporary files go to $GATEWAY_TMP"
    fi
}

# PING the private Redis with the default user's password (from the environment, not argv)
redis_ping() {
    REDISCLI_AUTH=$(cat "$RUN_DIR/redis/default.password") \
        redis-cli -h "${REDIS_ADDR%:*}" -p "${REDIS_ADDR##*:}" ping | grep -qx PONG
}

case $cmd in
    up) start_all ;;
    down) stop_all ;;
    prometheus-config) write_prometheus_config; echo "$RUN_DIR/prometheus/prometheus.yml" ;;
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
    *) die "usage: $0 run|up|down|prometheus-config" ;;
esac
