#!/usr/bin/env bash
# Random 4 KiB writes over data that lives on the HDD, against the same job
# over SSD-resident data, through the daemon on modelled drives on the real
# clock (fio's nbd engine). The issue's measure for the SSD write log:
# HDD-region IOPS / SSD-region IOPS while the reserve lasts.
#
#   benchmarks/daemon-hdd-writes.sh [TIERD_BINARY] [LABEL]
#
# Set-up: 1 GiB ssd-sata + 8 GiB hdd-5400 models (reserve 256 MiB), 3 GiB
# written sequentially, the first 256 MiB then pinned to the SSD (the
# SSD-resident region, waited for with `tierctl placement`); the HDD region
# is 512 MiB at 2 GiB. Each job runs RUNTIME seconds (default 5), in both
# orders. TIERCTL names the tierctl binary (default target/release/tierctl).
set -eu
BIN=${1:-target/release/tierd}
LABEL=${2:-$(basename "$BIN")}
RUNTIME=${RUNTIME:-5}
PORT=${PORT:-10931}
TIERCTL=${TIERCTL:-target/release/tierctl}
one() { # order
  local dir; dir=$(mktemp -d /var/tmp/hddw.XXXX)
  "$BIN" serve --data-dir "$dir" --ssd-size 1GiB --hdd-size 8GiB --ssd-model ssd-sata \
    --hdd-model hdd-5400 --listen 127.0.0.1:$PORT --metrics-listen "" --control "$dir/control.sock" \
    >"$dir/log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 100); do nbdinfo nbd://127.0.0.1:$PORT >/dev/null 2>&1 && break; sleep 0.2; done
  fio --name=fill --ioengine=nbd --uri=nbd://127.0.0.1:$PORT --rw=write --bs=1m --iodepth=4 \
    --size=3g --output="$dir/fill.json" --output-format=json >/dev/null
  "$TIERCTL" --control "$dir/control.sock" pin 0+256MiB --tier ssd >/dev/null
  for _ in $(seq 1 120); do
    "$TIERCTL" --control "$dir/control.sock" --json placement 0+256MiB |
      python3 -c "import json,sys; d=json.load(sys.stdin); sys.exit(0 if all(x['where']=='ssd' for x in d['runs']) else 1)" && break
    sleep 1
  done
  sleep 3
  local jobs
  if [ "$1" = hdd-first ]; then jobs="hdd ssd hdd4 ssd4"; else jobs="ssd hdd ssd4 hdd4"; fi
  for j in $jobs; do
    local off=0 size=512m conn=1 qd=4
    case $j in hdd*) off=2g ;; ssd*) size=256m ;; esac
    # The *4 jobs: four connections (fio's nbd engine opens one per job),
    # queue depth 1 each.
    case $j in *4) conn=4 qd=1 ;; esac
    fio --name=$j --ioengine=nbd --uri=nbd://127.0.0.1:$PORT --rw=randwrite --bs=4k \
      --iodepth=$qd --numjobs=$conn --group_reporting --offset=$off --size=$size \
      --time_based --runtime="$RUNTIME" --output="$dir/$j.json" --output-format=json >/dev/null
    python3 -c "
import json; d=json.load(open('$dir/$j.json'))['jobs'][0]['write']
print('$LABEL', '$1', '$j-region randwrite-4k', 'conns $conn qd $qd', round(d['iops']))" | tee -a "$dir/res"
    if [ "$j" = hdd ] || [ "$j" = hdd4 ]; then
      "$TIERCTL" --control "$dir/control.sock" status 2>/dev/null | grep -E '^(write log|shadows)' | sed 's/^/  /' || true
    fi
    sleep 2
  done
  python3 - "$dir/res" <<'PY'
import sys
r = {l.split()[2].split('-')[0]: float(l.split()[-1]) for l in open(sys.argv[1])}
print(f"  ratio hdd-region/ssd-region: 1 connection QD 4 {r['hdd'] / r['ssd']:.2f}, 4 connections {r['hdd4'] / r['ssd4']:.2f}")
PY
  kill -TERM $pid; wait $pid 2>/dev/null || true
  rm -rf "$dir"
}
one hdd-first
one ssd-first
