#!/usr/bin/env bash
# Sustained random 4 KiB writes to data on the HDD, through the daemon on
# modelled drives on the real clock (fio's nbd engine), with the SSD write
# log on and off: the IOPS, and the share of writes that found the log full
# (status write_log.full against the HDD region's writes).
#
#   benchmarks/daemon-log-sustained.sh [TIERD_BINARY]
#
# Set-up: 1 GiB ssd-sata + 8 GiB hdd-5400 models (reserve 256 MiB), FILL
# (default 3g) written sequentially (all but the first GiB lands on the
# HDD), then RUNTIME seconds (default 120) of random 4 KiB writes at queue
# depth QD (default 16) over SIZE (default 512m) at 2 GiB. A SIZE that
# fits the SSD can be promoted once the HDD has time for it; FILL=7g
# SIZE=4g keeps most of the data on the HDD. Runs log-on then log-off, or the
# other order with ORDER=off-first (ORDER=on or off: that run alone). TIERCTL names tierctl (default beside
# the tierd binary). SERVE_ARGS adds arguments to both serves (e.g.
# "--migrate.admission false": the data then stays on the HDD, and the runs
# measure the log alone; with admission on, a working set that fits the
# SSD comes up once the log leaves it free slots).
set -eu
BIN=${1:-target/release/tierd}
RUNTIME=${RUNTIME:-120}
QD=${QD:-16}
SIZE=${SIZE:-512m}
FILL=${FILL:-3g}
PORT=${PORT:-10951}
TIERCTL=${TIERCTL:-$(dirname "$BIN")/tierctl}
ORDER=${ORDER:-on-first}
SERVE_ARGS=${SERVE_ARGS:-}
# shellcheck disable=SC2086 # SERVE_ARGS is a list of arguments
one() { # true|false
  local dir; dir=$(mktemp -d /var/tmp/logsus.XXXX)
  "$BIN" serve --data-dir "$dir" --ssd-size 1GiB --hdd-size 8GiB --ssd-model ssd-sata \
    --hdd-model hdd-5400 --write-log "$1" --listen 127.0.0.1:$PORT --metrics-listen "" \
    --control "$dir/control.sock" $SERVE_ARGS >"$dir/log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 100); do nbdinfo nbd://127.0.0.1:$PORT >/dev/null 2>&1 && break; sleep 0.2; done
  fio --name=fill --ioengine=nbd --uri=nbd://127.0.0.1:$PORT --rw=write --bs=1m --iodepth=4 \
    --size="$FILL" --output="$dir/fill.json" --output-format=json >/dev/null
  sleep 3
  "$TIERCTL" --control "$dir/control.sock" --json status >"$dir/before.json"
  fio --name=w --ioengine=nbd --uri=nbd://127.0.0.1:$PORT --rw=randwrite --bs=4k \
    --iodepth="$QD" --offset=2g --size="$SIZE" --time_based --runtime="$RUNTIME" \
    --output="$dir/w.json" --output-format=json >/dev/null &
  local fio=$!
  # The log's course every 5 s: seconds, segments, dirty MiB, found full,
  # free SSD slots.
  while kill -0 $fio 2>/dev/null; do
    "$TIERCTL" --control "$dir/control.sock" --json status 2>/dev/null | python3 -c "
import json,sys,time; s=json.load(sys.stdin); w=s['write_log']
print(int(time.time()), w['segments'], w['dirty_bytes'] >> 20, w['full'], s['reserve']['ssd_free_bytes'] >> 20)" >>"$dir/course.txt" || true
    sleep 5
  done
  wait $fio
  "$TIERCTL" --control "$dir/control.sock" --json status >"$dir/after.json"
  sleep 30
  "$TIERCTL" --control "$dir/control.sock" --json status >"$dir/idle.json"
  kill -TERM $pid; wait $pid 2>/dev/null || true
  python3 - "$dir" "$1" <<'PY'
import json, sys
d, log = sys.argv[1], sys.argv[2]
w = json.load(open(f"{d}/w.json"))["jobs"][0]["write"]
b, a, i = (json.load(open(f"{d}/{n}.json")) for n in ("before", "after", "idle"))
ios = w["total_ios"]
full = a["write_log"]["full"] - b["write_log"]["full"]
back = a["write_log"]["written_back_bytes"] - b["write_log"]["written_back_bytes"]
print(f"write-log {log:5}: {w['iops']:8.0f} IOPS, mean {w['lat_ns']['mean']/1e6:7.2f} ms, "
      f"p99 {w['clat_ns']['percentile'].get('99.000000', 0)/1e6:7.1f} ms, "
      f"log found full {full}/{ios} = {100*full/max(ios,1):.1f} %, "
      f"written back during {back/2**20:.1f} MiB, "
      f"dirty at end {a['write_log']['dirty_bytes']/2**20:.1f} MiB, after 30 s idle "
      f"{i['write_log']['dirty_bytes']/2**20:.1f} MiB, "
      f"promoted {(a['migration']['promoted_bytes'] - b['migration']['promoted_bytes'])/2**20:.0f} MiB  ({d})")
PY
}
case $ORDER in
  off-first) one false; one true ;;
  on) one true ;;
  off) one false ;;
  *) one true; one false ;;
esac
