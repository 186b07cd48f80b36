#!/usr/bin/env bash
# Render nginx/gateway.conf.tmpl into an nginx prefix directory.
# usage: render-gateway.sh PREFIX LISTEN BACKEND [WORKERS] [LOG_LEVEL] [EXTRA_HTTP_FILE]
# TOLLGATE_GATEWAY_TMP: the directory of nginx's temporary files (default PREFIX/tmp).
# The gateway's /health and /metrics listen on TOLLGATE_METRICS_ADDR (127.0.0.1:9145) and answer
# the addresses of TOLLGATE_METRICS_ALLOW only (CIDRs or addresses, spaces or commas between;
# default "127.0.0.0/8 ::1"; "all" for any).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
prefix=$1 listen=$2 backend=$3 workers=${4:-2} level=${5:-notice} extra_file=${6:-}
metrics_listen=${TOLLGATE_METRICS_ADDR:-127.0.0.1:9145}
tmp=${TOLLGATE_GATEWAY_TMP:-$prefix/tmp}     # nginx's temporary files (its workers must reach it)
[ "$metrics_listen" != "$listen" ] || { echo "TOLLGATE_METRICS_ADDR must differ from $listen" >&2; exit 1; }
allow=""
for a in ${TOLLGATE_METRICS_ALLOW:-127.0.0.0/8 ::1}; do
    a=${a//,/ }
    for b in $a; do
        [[ $b =~ ^[0-9A-Fa-f.:/]+$ || $b = all ]] || { echo "TOLLGATE_METRICS_ALLOW: bad entry '$b'" >&2; exit 1; }
        allow="${allow}allow $b; "
    done
done
allow="${allow}deny all;"
mkdir -p "$prefix"/{conf,logs,tmp,lua}
ln -sfn "$repo/lua/tollgate" "$prefix/lua/tollgate"
# the version /health and /metrics report (handler.lua reads it; "dev" without the file)
printf 'return { version = "%s" }\n' "$("$repo/scripts/version.sh")" > "$prefix/lua/tollgate_build.lua"
extra=""
[ -n "$extra_file" ] && extra="include $extra_file;"
sed -e "s|@TMP@|$tmp|g" -e "s|@PREFIX@|$prefix|g" -e "s|@REPO@|$repo|g" -e "s|@LISTEN@|$listen|g" \
    -e "s|@METRICS_LISTEN@|$metrics_listen|g" -e "s|@METRICS_ALLOW@|$allow|g" \
    -e "s|@BACKEND@|$backend|g" -e "s|@WORKERS@|$workers|g" -e "s|@LOG_LEVEL@|$level|g" \
    -e "s|@ACCESS_LOG@|access_log off;|g" \
    -e "s|@EXTRA_HTTP@|$extra|g" "$repo/nginx/gateway.conf.tmpl" > "$prefix/conf/nginx.conf"
echo "$prefix/conf/nginx.conf"
