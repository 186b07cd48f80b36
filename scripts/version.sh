#!/usr/bin/env bash
# Prints tollgate's version: `git describe --always --dirty --tags` of the checkout (a tag such
# as v1.4.0, v1.4.0-3-g1a2b3c4 three commits after it, a bare commit id before the first tag,
# "-dirty" with uncommitted changes); without git (an unpacked source tarball) the first line of
# the VERSION file next to the Makefile; else "dev". The Makefile passes it to the Go linker,
# the gateway renders and make install / make dist write it into tollgate_build.lua.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# The version lands in a Lua string, a metric label and file names: only [A-Za-z0-9._+-].
if v=$(git -C "$repo" describe --always --dirty --tags 2>/dev/null) && [ -n "$v" ]; then
    :
elif [ -s "$repo/VERSION" ]; then
    v=$(head -n 1 "$repo/VERSION" | tr -d '[:space:]')
else
    v=dev
fi
if ! [[ $v =~ ^[A-Za-z0-9._+-]{1,64}$ ]]; then
    echo "version.sh: version '$v' is not 1-64 characters of [A-Za-z0-9._+-]" >&2
    exit 1
fi
echo "$v"
