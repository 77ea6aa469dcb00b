#!/usr/bin/env bash
# The drive suite's worst case through the daemon, on modelled drives on the
# real clock (fio's nbd engine): uniform random reads over a region on the
# HDD build heat for a while (the rows before), then an Iometer-style
# workstation row (8 KiB, 80 % reads, 80 % random) at QD 1 on the same
# region. Promotions earned by uniform random reads never pay back in a
# short row; `migrate.promote-share` bounds what they take of the HDD.
#
#   [SHARE=0.02] benchmarks/daemon-drive-rows.sh [TIERD_BINARY ...]
#
# SHARE sets the hybrid's `migrate.promote-share` (default: the binary's).
# Per binary, two volumes of 1 GiB ssd-sata + 8 GiB hdd-5400 (reserve
# 256 MiB), each with 2 GiB of data written first (the region, 512 MiB from
# 1536 MiB on, lies on the HDD):
# - "hybrid": the migrator on, as configured;
# - "hdd": the migrator off, so the region is served by the HDD alone: the
#   baseline through the same path.
# Prints the workstation row's IOPS for each, and their ratio.
set -eu
[ $# -gt 0 ] || set -- target/release/tierd
PORT=${PORT:-10942}
WARM=${WARM:-20}
ROW=${ROW:-10}
command -v fio >/dev/null || { echo "daemon-drive-rows: fio is not installed" >&2; exit 1; }

one() { # BIN KIND -> IOPS of the row
    local bin=$1 kind=$2 dir pid
    dir=$(mktemp -d /var/tmp/drive-rows.XXXX)
    local env=()
    [ "$kind" = hdd ] && env=(TIERD_MIGRATE__ENABLED=false)
    [ "$kind" = hybrid ] && [ -n "${SHARE:-}" ] && env=(TIERD_MIGRATE__PROMOTE_SHARE=$SHARE)
    env "${env[@]}" "$bin" serve --data-dir "$dir" --ssd-size 1GiB --hdd-size 8GiB --reserve 256MiB \
        --ssd-model ssd-sata --hdd-model hdd-5400 --listen 127.0.0.1:$PORT --metrics-listen "" \
        --control "$dir/control.sock" >"$dir/log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do nbdinfo nbd://127.0.0.1:$PORT >/dev/null 2>&1 && break; sleep 0.2; done
    local uri=nbd://127.0.0.1:$PORT
    fio --name=fill --ioengine=nbd --uri=$uri --rw=write --bs=1m --iodepth=4 --size=2g \
        --output=/dev/null >/dev/null
    sleep 5
    fio --name=warm --ioengine=nbd --uri=$uri --rw=randread --bs=4k --iodepth=1 \
        --offset=1536m --size=512m --time_based --runtime=$WARM --output=/dev/null >/dev/null
    fio --name=row --ioengine=nbd --uri=$uri --rw=randrw --rwmixread=80 --percentage_random=80 \
        --bs=8k --iodepth=1 --offset=1536m --size=512m --time_based --runtime=$ROW \
        --output="$dir/row.json" --output-format=json >/dev/null
    kill -TERM $pid
    wait $pid 2>/dev/null || true
    python3 -c "import json; j=json.load(open('$dir/row.json'))['jobs'][0]; print(round(j['read']['iops']+j['write']['iops'],1))"
    rm -rf "$dir"
}

printf '%-28s %10s %10s %8s\n' binary hybrid hdd ratio
for bin in "$@"; do
    h=$(one "$bin" hybrid)
    d=$(one "$bin" hdd)
    printf '%-28s %10s %10s %8s\n' "$bin" "$h" "$d" "$(python3 -c "print(round($h/$d,3))")"
done
