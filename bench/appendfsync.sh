#!/bin/sh
# usage: bench/appendfsync.sh [DIR] — SET throughput and latency (redis-benchmark --csv: rps, avg, min, p50, p95, p99, max ms) of a private redis-server per appendfsync mode, data in DIR (default .run); docs/durability.md has the figures
for mode in off everysec always; do
  mkdir -p "${1:-.run}"; d=$(mktemp -d -p "${1:-.run}" durbench.XXXX)
  port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  if [ $mode = off ]; then ao=no; fs=everysec; else ao=yes; fs=$mode; fi
  redis-server --port $port --bind 127.0.0.1 --dir $d --appendonly $ao --appendfsync $fs --save '' --daemonize no --logfile $d/log &
  pid=$!; sleep 0.5
  for c in 1 50; do
    printf '%s c=%s ' $mode $c; redis-benchmark -p $port -t set -n 20000 -c $c --csv | tail -1
  done
  kill $pid; wait $pid 2>/dev/null; rm -rf $d
done
