#!/usr/bin/env bash
# Idempotent installer of everything tollgate needs on Debian 12: Debian packages, Go modules
# from the committed go.sum, npm packages from the committed lockfile. Safe to run repeatedly;
# does nothing when everything is present.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

# nginx-extras ships OpenResty's LuaJIT (libluajit2); the matching interpreter is luajit2.
# docker-compose: make test validates docker-compose.yml with `docker-compose config` (no
# daemon needed; containers never run here). systemd: systemd-analyze verifies the units.
# awscli, s3cmd, rclone, python3-boto3: the real S3 clients of the client suite (t/s3clients_test.go).
PACKAGES=(nginx-extras lua-nginx-redis lua-nginx-redis-connector lua-nginx-string lua-cjson
          redis-server redis-tools redis-sentinel prometheus wrk hyperfine lua-busted lua-check
          luajit2 chromium curl procps ca-certificates docker-compose systemd
          awscli s3cmd rclone python3-boto3)

missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: installing Debian packages: ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # the packages start system services where an init system runs them; tollgate never uses
    # them (it runs its own redis-server and nginx on private ports)
    for svc in redis-server nginx prometheus prometheus-node-exporter; do
        if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
            $SUDO systemctl stop "$svc" || true
        fi
    done
else
    echo "install-deps: Debian packages present"
fi

if ! command -v go >/dev/null 2>&1; then
    if [ -x /usr/local/go/bin/go ]; then
        export PATH=$PATH:/usr/local/go/bin
    else
        echo "install-deps: Go toolchain not found (expected /usr/local/go)" >&2
        exit 1
    fi
fi
echo "install-deps: Go modules (go.sum pinned)"
GOFLAGS=-mod=readonly go mod download

if [ -f web/package-lock.json ]; then
    if [ -L web/node_modules ]; then
        # a link to an install shared by several checkouts: npm ci would empty the shared
        # directory under everyone using it
        echo "install-deps: web/node_modules links to a shared install; not touched"
    elif [ ! -d web/node_modules ] || [ web/package-lock.json -nt web/node_modules/.package-lock.json ]; then
        echo "install-deps: npm packages (package-lock.json)"
        (cd web && npm ci --no-audit --no-fund --loglevel=error)
    else
        echo "install-deps: npm packages present"
    fi
fi
