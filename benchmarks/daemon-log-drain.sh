#!/usr/bin/env bash
# A full volume's write log under random writes, then idle, on image files
# through the daemon (fio's nbd engine): every extent gets one 4 KiB write
# (fio's io_size keeps it to one pass: with --size alone fio wraps and
# writes the whole volume 4 KiB at a time), then RUNTIME seconds (default
# 60) of random 4 KiB writes at queue depth 16 over the whole volume, then
# the log's dirty bytes each second while idle: the drain rate (over the
# whole idle time, and from the first second anything was written back).
#
#   benchmarks/daemon-log-drain.sh [TIERD_BINARY]
#
# SSD_SIZE and HDD_SIZE set the images (default 1GiB and 8GiB); IDLE the
# seconds watched (default 60); WRITE_LOG=false runs the same writes with
# the write log off (the baseline the log must never be slower than). TIERCTL names tierctl (default beside tierd).
# SERVE_ARGS adds flags to `tierd serve` (split on spaces), e.g.
# SERVE_ARGS="--migrate.bandwidth 1GiB". Each idle second's line in
# drain.txt: seconds, dirty bytes, written-back bytes, found-full count,
# migration rounds so far.
set -eu
BIN=${1:-target/release/tierd}
RUNTIME=${RUNTIME:-60}
IDLE=${IDLE:-60}
PORT=${PORT:-10961}
SSD_SIZE=${SSD_SIZE:-1GiB}
HDD_SIZE=${HDD_SIZE:-8GiB}
WRITE_LOG=${WRITE_LOG:-true}
TIERCTL=${TIERCTL:-$(dirname "$BIN")/tierctl}
dir=$(mktemp -d /var/tmp/logdrain.XXXX)
# shellcheck disable=SC2086 # SERVE_ARGS is a list of arguments
"$BIN" serve --data-dir "$dir" --ssd-size "$SSD_SIZE" --hdd-size "$HDD_SIZE" \
  --write-log "$WRITE_LOG" ${SERVE_ARGS:-} \
  --listen 127.0.0.1:$PORT --metrics-listen "" --control "$dir/control.sock" >"$dir/log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do nbdinfo nbd://127.0.0.1:$PORT >/dev/null 2>&1 && break; sleep 0.2; done
size=$(nbdinfo --size nbd://127.0.0.1:$PORT)
extents=$((size / 1048576))
t0=$(date +%s.%N)
fio --name=touch --ioengine=nbd --uri=nbd://127.0.0.1:$PORT --rw=write:1020k --bs=4k \
  --iodepth=16 --size=$((extents))M --io_size=$((extents * 4))k \
  --output="$dir/touch.json" --output-format=json >/dev/null
t1=$(date +%s.%N)
echo "touched $extents extents, one 4 KiB write each, in $(echo "$t1 - $t0" | bc) s"
fio --name=w --ioengine=nbd --uri=nbd://127.0.0.1:$PORT --rw=randwrite --bs=4k --iodepth=16 \
  --time_based --runtime="$RUNTIME" --output="$dir/w.json" --output-format=json >/dev/null
python3 -c "
import json; w=json.load(open('$dir/w.json'))['jobs'][0]['write']
print(f\"random 4 KiB writes over the full volume: {w['iops']:.0f} IOPS, mean {w['lat_ns']['mean']/1e6:.2f} ms\")"
for s in $(seq 0 "$IDLE"); do
  printf '%s ' "$s"
  "$TIERCTL" --control "$dir/control.sock" --json status |
    python3 -c "import json,sys; s=json.load(sys.stdin); w=s['write_log']; print(w['dirty_bytes'], w['written_back_bytes'], w['full'], s['migration']['rounds'])"
  sleep 1
done >"$dir/drain.txt"
python3 - "$dir/drain.txt" <<'PY'
import sys
rows = [list(map(int, l.split())) for l in open(sys.argv[1])]
d0, b0 = rows[0][1], rows[0][2]
print(f"log dirty at the end of the writes: {d0 / 2**20:.1f} MiB (found full {rows[0][3]} times)")
end = next((r for r in rows if r[1] == 0), rows[-1])
t = max(end[0], 1)
print(f"idle: {(end[2] - b0) / 2**20:.1f} MiB written back in {t} s = {(end[2] - b0) / 2**20 / t:.1f} MiB/s; "
      f"dirty then {end[1] / 2**20:.1f} MiB")
# The first seconds also pay for the random writes' own unsynced pages (the
# first sync of the HDD image flushes them): the rate from the first second
# anything was written back to the end is the write-back's own.
first = next((r for r in rows if r[2] > b0), None)
if first is not None and end[0] > first[0]:
    print(f"idle, from the first second written back ({first[0]} s): "
          f"{(end[2] - first[2]) / 2**20 / (end[0] - first[0]):.1f} MiB/s")
PY
echo "($dir)"
