#!/usr/bin/env bash
# make dist: dist/tollgate-<version>-linux-amd64.tar.gz and dist/<that>.sha256. The tarball's
# one directory, tollgate-<version>-linux-amd64/, holds the install tree of PREFIX=/usr
# (scripts/install.sh: usr/bin, usr/share/tollgate/{lua,redis-scripts,nginx,deploy,doc},
# usr/lib/systemd/system, etc/tollgate, etc/nginx), the console's files (usr/share/tollgate/
# console; the control plane also embeds them), docker-compose.yml, Dockerfile, the scripts
# and docs, and SHA256SUMS of every file in it. Binaries are static (CGO_ENABLED=0) and built
# with -trimpath; file times are the commit's, so two builds of one commit give the same bytes.
# Environment: VERSION (scripts/version.sh), OUT_DIR (dist/).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
export PATH=$PATH:/usr/local/go/bin
VERSION=${VERSION:-$(scripts/version.sh)}
OUT_DIR=${OUT_DIR:-$repo/dist}
[[ $VERSION =~ ^[A-Za-z0-9._+-]{1,64}$ ]] || { echo "dist: bad VERSION '$VERSION'" >&2; exit 1; }
[ -f web/dist/index.html ] || { echo "dist: the console is not built (web/dist/index.html): run 'make build'" >&2; exit 1; }
name=tollgate-$VERSION-linux-amd64
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
top=$stage/$name
mkdir -p "$top" "$stage/bin"

CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath \
    -ldflags "-s -w -X tollgate/internal/version.Version=$VERSION" -o "$stage/bin/" \
    ./controlplane/cmd/tollgate-controlplane ./demo/cmd/tollgate-demo-s3
DESTDIR=$top PREFIX=/usr SYSCONFDIR=/etc UNITDIR=/usr/lib/systemd/system VERSION=$VERSION \
    BIN_DIR=$stage/bin scripts/install.sh >/dev/null
mkdir -p "$top/usr/share/tollgate/console"
cp -R web/dist/. "$top/usr/share/tollgate/console/"
rm -f "$top/usr/share/tollgate/console/.gitkeep"
cp -R docs "$top/docs"
cp README.md docker-compose.yml Dockerfile "$top/"
mkdir -p "$top/scripts"
cp scripts/stack.sh scripts/render-gateway.sh scripts/version.sh "$top/scripts/"
cp -R nginx "$top/nginx"
echo "$VERSION" > "$top/VERSION"

epoch=$(git log -1 --format=%ct 2>/dev/null || date +%s)
(cd "$top" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs -d '\n' sha256sum > SHA256SUMS)
mkdir -p "$OUT_DIR"
tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner -C "$stage" -cf - "$name" \
    | gzip -n -9 > "$OUT_DIR/$name.tar.gz"
(cd "$OUT_DIR" && sha256sum "$name.tar.gz" > "$name.tar.gz.sha256")
echo "$OUT_DIR/$name.tar.gz"
