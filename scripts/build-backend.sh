#!/usr/bin/env bash
# Builds the S3 storage backend of `make run` and of the integration tests: versitygw (a
# production S3 server, Apache-2.0) with its posix backend, from the Go module proxy at the
# version pinned in tools/versitygw/go.mod, every dependency checked against the committed
# tools/versitygw/go.sum. Output: $BIN_DIR/versitygw (default bin/). Does nothing when the
# binary was built from the same go.mod, go.sum and Go toolchain (a stamp beside it says which);
# the first build takes about 2.5 minutes of CPU (docs/operations.md, "The storage backend").
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
BIN_DIR=${BIN_DIR:-$repo/bin}
GO=${GO:-go}
command -v "$GO" >/dev/null 2>&1 || GO=/usr/local/go/bin/go
tools="$repo/tools/versitygw"
version=$(sed -n 's#^[[:space:]]*github.com/versity/versitygw \(v[^ ]*\).*#\1#p' "$tools/go.mod" | head -n 1)
[ -n "$version" ] || { echo "build-backend: no versitygw version in $tools/go.mod" >&2; exit 1; }
stamp="$BIN_DIR/.versitygw.stamp"
want=$(cat "$tools/go.mod" "$tools/go.sum" <("$GO" version) | sha256sum | cut -d' ' -f1)
if [ -x "$BIN_DIR/versitygw" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi
mkdir -p "$BIN_DIR"
echo "build-backend: building versitygw $version (tools/versitygw; a few minutes the first time)"
start=$(date +%s)
tmp=$(mktemp "$BIN_DIR/.versitygw.XXXXXX")
trap 'rm -f "$tmp"' EXIT
(cd "$tools" && GOFLAGS="-mod=readonly -buildvcs=false" "$GO" build -trimpath -ldflags "-s -w -X main.Version=$version" \
    -o "$tmp" github.com/versity/versitygw/cmd/versitygw)
chmod 755 "$tmp"
mv -f "$tmp" "$BIN_DIR/versitygw"
printf '%s\n' "$want" > "$stamp"
echo "build-backend: bin/versitygw $version built in $(( $(date +%s) - start )) s"
