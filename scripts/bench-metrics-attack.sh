#!/usr/bin/env bash
# Benchmark (not a test): the data path while /metrics is attacked. One irisd with
# --metrics-address; a 2-rank host-engine all-gather sweep (64 B to 1 MiB, p50), first alone,
# then beside 500 slow/idle/garbage connections to the metrics port, a garbage request every
# 10 ms and a scrape every 100 ms (each timed: the slowest is printed). Prints a markdown table
# with the ratio, attacked / alone.
#   scripts/bench-metrics-attack.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null
bin=build/tests/bench
run=$(mktemp -d /tmp/irisd-metrics-attack-XXXXXX)
socket=$run/irisd.sock
build/daemon/irisd --socket "$socket" --engine host --metrics-address 127.0.0.1:0 \
  --log-level warn >"$run/irisd.log" 2>&1 &
daemon=$!
attack=
trap 'kill $attack $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$run"' EXIT
for _ in $(seq 100); do [ -S "$socket.attach" ] && break; sleep 0.1; done
url=$(build/client/iris-ctl --socket "$socket" status --json |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["irisd"]["metrics"])')

sweep() {  # $1: output file (bytes,p50 us)
  local pids=() key
  key="bench-$(basename "$1" .csv)"
  for r in 1 0; do
    timeout 300 "$bin/iris-collective-sweep" --socket "$socket" --key "$key" \
      --nranks 2 --rank "$r" --no-verify --max-bytes $((1 << 20)) --csv >"$run/sweep.$r" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  tail -n +2 "$run/sweep.0" | cut -d, -f2,4 >"$1"
}

sweep "$run/alone.csv"
timeout 600 python3 - "$url" >"$run/attack.log" 2>&1 <<'PY' &
import socket, sys, time, urllib.parse, urllib.request
url = sys.argv[1]
u = urllib.parse.urlparse(url)
held = []
for i in range(500):
    s = socket.create_connection((u.hostname, u.port))
    if i % 3 == 1:
        s.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    elif i % 3 == 2:
        s.send(b"\x16\x03\x01garbage\r\n\r\n")
    held.append(s)
worst = 0.0
n = 0
while True:
    t = time.monotonic()
    urllib.request.urlopen(url, timeout=10).read()
    worst = max(worst, time.monotonic() - t)
    n += 1
    print(f"{n} scrapes, slowest {worst * 1000:.2f} ms", flush=True)
    for _ in range(10):
        g = socket.create_connection((u.hostname, u.port))
        g.send(b"\x00\xff not http\r\n\r\n")
        g.close()
        time.sleep(0.01)
    # Slow connections are closed at their deadline: open fresh ones, as an attacker would.
    if n % 20 == 0:
        for s in held[:100]:
            s.close()
        held = held[100:] + [socket.create_connection((u.hostname, u.port)) for _ in range(100)]
PY
attack=$!
sleep 2
sweep "$run/attacked.csv"
echo "## 2-rank all-gather p50 beside an attack on /metrics ($(nproc) cores, $(git describe --always --dirty))"
echo "| bytes/block | alone p50 us | attacked p50 us | attacked/alone |"
echo "| ---: | ---: | ---: | ---: |"
join -t, "$run/alone.csv" "$run/attacked.csv" | sort -t, -n -k1 |
  awk -F, '{printf "| %s | %.2f | %.2f | %.2f |\n", $1, $2, $3, $3 / $2}'
echo
echo "scraper: $(tail -1 "$run/attack.log")"
