#!/usr/bin/env bash
# Render nginx/gateway.conf.tmpl into an nginx prefix directory.
# usage: render-gateway.sh PREFIX LISTEN BACKEND [WORKERS] [LOG_LEVEL] [EXTRA_HTTP_FILE]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
prefix=$1 listen=$2 backend=$3 workers=${4:-2} level=${5:-notice} extra_file=${6:-}
mkdir -p "$prefix"/{conf,logs,tmp,lua}
ln -sfn "$repo/lua/tollgate" "$prefix/lua/tollgate"
# the version /health and /metrics report (handler.lua reads it; "dev" without the file)
printf 'return { version = "%s" }\n' "$("$repo/scripts/version.sh")" > "$prefix/lua/tollgate_build.lua"
extra=""
[ -n "$extra_file" ] && extra="include $extra_file;"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@REPO@|$repo|g" -e "s|@LISTEN@|$listen|g" \
    -e "s|@BACKEND@|$backend|g" -e "s|@WORKERS@|$workers|g" -e "s|@LOG_LEVEL@|$level|g" \
    -e "s|@ACCESS_LOG@|access_log off;|g" \
    -e "s|@EXTRA_HTTP@|$extra|g" "$repo/nginx/gateway.conf.tmpl" > "$prefix/conf/nginx.conf"
echo "$prefix/conf/nginx.conf"
