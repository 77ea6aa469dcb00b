#!/usr/bin/env bash
# The landing burst through the daemon, on modelled drives on the real clock
# (fio's nbd engine): twice the reserve of new data, 256 KiB writes at QD 4,
# sequential, into a region nothing wrote before. fio's bandwidth log (100 ms
# bins) gives MiB/s while the first reserve's worth lands and after it, as
# `tierd bench --suite landing` computes them.
#
#   benchmarks/daemon-landing.sh [TIERD_BINARY ...]
#
# Per binary, two volumes of 1 GiB ssd-sata + 8 GiB hdd-5400 (reserve 256 MiB):
# - "hybrid": 4 GiB of data written first and settled until the SSD's free
#   slots are back to the reserve (`tierctl status`), then the burst;
# - "ssd": a fresh volume, whose 1 GiB of free SSD takes the whole burst at
#   the SSD model's speed: the pure-SSD baseline through the same path.
# TIERCTL names the tierctl binary (default: next to each tierd).
set -eu
[ $# -gt 0 ] || set -- target/release/tierd
PORT=${PORT:-10941}
RESERVE_MIB=256
command -v fio >/dev/null || { echo "daemon-landing: fio is not installed" >&2; exit 1; }

# rates LOG: "first after" MiB/s from a fio bandwidth log (ms, KiB/s).
rates() {
    python3 - "$1" "$RESERVE_MIB" <<'EOF'
import sys
rows = []
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(",")]
    rows.append((int(f[0]) / 1000.0, int(f[1]) / 1024.0))  # s, MiB/s
reserve = float(sys.argv[2])
landed, t_prev, t_res = 0.0, 0.0, None
for t, mibps in rows:
    got = mibps * (t - t_prev)
    if t_res is None and landed + got >= reserve and got > 0:
        t_res = t_prev + (reserve - landed) / got * (t - t_prev)
    landed += got
    t_prev = t
if t_res is None:
    print("nan nan")
else:
    after = (landed - reserve) / (t_prev - t_res) if t_prev > t_res else float("nan")
    print(f"{reserve / t_res:.1f} {after:.1f}")
EOF
}

one() { # BIN KIND -> "first after"
    local bin=$1 kind=$2 dir tierctl pid
    tierctl=${TIERCTL:-$(dirname "$bin")/tierctl}
    dir=$(mktemp -d /var/tmp/landing.XXXX)
    "$bin" serve --data-dir "$dir" --ssd-size 1GiB --hdd-size 8GiB --reserve ${RESERVE_MIB}MiB \
        --ssd-model ssd-sata --hdd-model hdd-5400 --listen 127.0.0.1:$PORT --metrics-listen "" \
        --control "$dir/control.sock" >"$dir/log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do nbdinfo nbd://127.0.0.1:$PORT >/dev/null 2>&1 && break; sleep 0.2; done
    if [ "$kind" = hybrid ]; then
        fio --name=fill --ioengine=nbd --uri=nbd://127.0.0.1:$PORT --rw=write --bs=1m \
            --iodepth=4 --size=4g --output="$dir/fill.json" --output-format=json >/dev/null
        local free=0
        for _ in $(seq 1 300); do
            free=$("$tierctl" --control "$dir/control.sock" status --json |
                python3 -c "import json,sys; d=json.load(sys.stdin); print([t['free_bytes'] for t in d['tiers'] if t['tier']=='ssd'][0] >> 20)")
            [ "$free" -ge "$RESERVE_MIB" ] && break
            sleep 1
        done
        echo "  $(basename "$bin") hybrid: SSD free ${free} MiB before the burst" >&2
    fi
    fio --name=burst --ioengine=nbd --uri=nbd://127.0.0.1:$PORT --rw=write --bs=256k \
        --iodepth=4 --offset=5g --size=$((2 * RESERVE_MIB))m --write_bw_log="$dir/burst" \
        --log_avg_msec=100 --output="$dir/burst.json" --output-format=json >/dev/null
    kill -TERM $pid
    wait $pid 2>/dev/null || true
    rates "$dir"/burst_bw*.log
    rm -rf "$dir"
}

printf '%-28s %-7s %12s %12s\n' binary volume "first MiB/s" "after MiB/s"
for bin in "$@"; do
    for kind in hybrid ssd; do
        read -r first after < <(one "$bin" "$kind")
        printf '%-28s %-7s %12s %12s\n' "$bin" "$kind" "$first" "$after"
    done
done
