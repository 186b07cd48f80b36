#!/usr/bin/env bash
# make install: tollgate in an FHS layout under $DESTDIR (see docs/deploy.md).
#   $PREFIX/bin/tollgate-controlplane, tollgate-demo-s3      (built by make build)
#   $PREFIX/share/tollgate/lua/tollgate/…, lua/tollgate_build.lua (the version)
#   $PREFIX/share/tollgate/redis-scripts/, nginx/ (the includes), deploy/, doc/
#   $SYSCONFDIR/tollgate/controlplane.env, gateway.env (0640), nginx/tollgate-site.conf
#   $SYSCONFDIR/nginx/modules-enabled/90-tollgate.conf, conf.d/tollgate.conf (Debian's nginx)
#   $UNITDIR/tollgate-controlplane.service, $UNITDIR/nginx.service.d/tollgate.conf
# Files in $SYSCONFDIR are the operator's: an existing one is kept (the new one is written
# next to it as <name>.new). Environment: DESTDIR, PREFIX, SYSCONFDIR, UNITDIR, VERSION, and
# BIN_DIR (where the built binaries are, default bin/).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
: "${PREFIX:=/usr/local}" "${SYSCONFDIR:=/etc}" "${UNITDIR:=$PREFIX/lib/systemd/system}"
DESTDIR=${DESTDIR:-}
VERSION=${VERSION:-$("$repo/scripts/version.sh")}
[[ $VERSION =~ ^[A-Za-z0-9._+-]{1,64}$ ]] || { echo "install: bad VERSION '$VERSION'" >&2; exit 1; }
for d in PREFIX SYSCONFDIR UNITDIR; do
    [[ ${!d} == /* && ${!d} != *[[:space:]\|\&]* ]] || { echo "install: $d must be an absolute path without spaces, | or &" >&2; exit 1; }
done
BINDIR=$PREFIX/bin
SHAREDIR=$PREFIX/share/tollgate
NGINXDIR=$SYSCONFDIR/nginx

BIN_DIR=${BIN_DIR:-$repo/bin}
for b in tollgate-controlplane tollgate-demo-s3; do
    [ -x "$BIN_DIR/$b" ] || { echo "install: $BIN_DIR/$b missing: run 'make build' first" >&2; exit 1; }
done

subst() { # template -> stdout with the install paths filled in
    sed -e "s|@PREFIX@|$PREFIX|g" -e "s|@BINDIR@|$BINDIR|g" -e "s|@SHAREDIR@|$SHAREDIR|g" \
        -e "s|@SYSCONFDIR@|$SYSCONFDIR|g" -e "s|@NGINXDIR@|$NGINXDIR|g" "$1"
}
# an operator's file: written when absent, else kept and the new one put next to it
install_conf() { # mode, content file, destination
    local dst=$DESTDIR$3
    if [ -e "$dst" ] && ! cmp -s "$2" "$dst"; then
        install -m "$1" "$2" "$dst.new"
        echo "install: kept $3 (the new one is $3.new)"
    else
        install -m "$1" "$2" "$dst"
    fi
}

install -d "$DESTDIR$BINDIR" "$DESTDIR$SHAREDIR/lua" "$DESTDIR$SHAREDIR/redis-scripts" \
    "$DESTDIR$SHAREDIR/nginx" "$DESTDIR$SHAREDIR/doc" "$DESTDIR$UNITDIR/nginx.service.d" \
    "$DESTDIR$NGINXDIR/modules-enabled" "$DESTDIR$NGINXDIR/conf.d"
install -d -m 0755 "$DESTDIR$SYSCONFDIR/tollgate" "$DESTDIR$SYSCONFDIR/tollgate/nginx"
install -m 0755 "$BIN_DIR/tollgate-controlplane" "$BIN_DIR/tollgate-demo-s3" "$DESTDIR$BINDIR/"

# the gateway's Lua (a fresh copy: files removed upstream must not linger) and its version
rm -rf "$DESTDIR$SHAREDIR/lua/tollgate"
cp -R "$repo/lua/tollgate" "$DESTDIR$SHAREDIR/lua/tollgate"
find "$DESTDIR$SHAREDIR/lua" -type d -exec chmod 0755 {} + -o -type f -exec chmod 0644 {} +
printf 'return { version = "%s" }\n' "$VERSION" > "$DESTDIR$SHAREDIR/lua/tollgate_build.lua"
chmod 0644 "$DESTDIR$SHAREDIR/lua/tollgate_build.lua"
install -m 0644 "$repo"/redis-scripts/*.lua "$DESTDIR$SHAREDIR/redis-scripts/"
# the includes, with the package path pointing at the installed Lua instead of <prefix>/lua
sed -e "s|^lua_package_path .*|lua_package_path \"$SHAREDIR/lua/?.lua;;\";|" \
    "$repo/nginx/tollgate_http.conf" > "$DESTDIR$SHAREDIR/nginx/tollgate_http.conf"
install -m 0644 "$repo/nginx/tollgate_location.conf" "$repo/nginx/tollgate_s3_errors.conf" \
    "$repo/nginx/tollgate_env.conf" "$DESTDIR$SHAREDIR/nginx/"
chmod 0644 "$DESTDIR$SHAREDIR/nginx/tollgate_http.conf"
rm -rf "$DESTDIR$SHAREDIR/deploy"
mkdir -p "$DESTDIR$SHAREDIR/deploy"
cp -R "$repo/deploy/." "$DESTDIR$SHAREDIR/deploy/"
[ -f "$repo/docs/deploy.md" ] && install -m 0644 "$repo/docs/deploy.md" "$DESTDIR$SHAREDIR/doc/"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
subst "$repo/deploy/systemd/tollgate-controlplane.service" > "$tmp/unit"
install -m 0644 "$tmp/unit" "$DESTDIR$UNITDIR/tollgate-controlplane.service"
subst "$repo/deploy/systemd/nginx.service.d/tollgate.conf" > "$tmp/dropin"
install -m 0644 "$tmp/dropin" "$DESTDIR$UNITDIR/nginx.service.d/tollgate.conf"

subst "$repo/deploy/systemd/controlplane.env" > "$tmp/cp.env"
install_conf 0640 "$tmp/cp.env" "$SYSCONFDIR/tollgate/controlplane.env"
subst "$repo/deploy/systemd/gateway.env" > "$tmp/gw.env"
install_conf 0640 "$tmp/gw.env" "$SYSCONFDIR/tollgate/gateway.env"
subst "$repo/deploy/nginx/tollgate-site.conf" > "$tmp/site.conf"
install_conf 0644 "$tmp/site.conf" "$SYSCONFDIR/tollgate/nginx/tollgate-site.conf"
# main context: the env lines that let the workers read the gateway's settings
echo "include $SHAREDIR/nginx/tollgate_env.conf;" > "$tmp/mod"
install_conf 0644 "$tmp/mod" "$NGINXDIR/modules-enabled/90-tollgate.conf"
echo "include $SYSCONFDIR/tollgate/nginx/tollgate-site.conf;" > "$tmp/confd"
install_conf 0644 "$tmp/confd" "$NGINXDIR/conf.d/tollgate.conf"

echo "install: tollgate $VERSION in ${DESTDIR:-/} (PREFIX=$PREFIX SYSCONFDIR=$SYSCONFDIR UNITDIR=$UNITDIR)"
