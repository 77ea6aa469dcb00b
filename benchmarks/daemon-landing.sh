#!/usr/bin/env bash
# The landing burst through the daemon, on modelled drives on the real clock
# (fio's nbd engine): twice the reserve of new data, 256 KiB writes at QD 4,
# sequential, into a region nothing wrote before. fio's bandwidth log (100 ms
# bins) gives MiB/s while the first reserve's worth lands and after it, as
# `tierd bench --suite landing` computes them.
#
#   [SSD_MODEL=ssd-sata] [HDD_MODEL=hdd-5400] [STREAMS=1] [KINDS="hybrid ssd hdd"] \
#       benchmarks/daemon-landing.sh [TIERD_BINARY ...]
#
# Per binary, three volumes of 1 GiB SSD_MODEL + 8 GiB HDD_MODEL (reserve
# 256 MiB):
# - "hybrid": 4 GiB of data written first and settled until the SSD's free
#   slots are back to the reserve (`tierctl status`), then the burst;
# - "ssd": a fresh volume, whose 1 GiB of free SSD takes the whole burst at
#   the SSD model's speed: the pure-SSD baseline through the same path;
# - "hdd": a fresh volume with the burst's range pinned to the HDD
#   (`tierctl pin`): the pure-HDD baseline through the same path.
# STREAMS > 1 splits the burst into that many sequential streams, one fio job
# (and NBD connection) each, QD 4 in all, spread evenly over the range: four
# streams are the bench's landing suite (each of its workers writes its own
# quarter), where streams spilling to the HDD at once can interleave their
# extents on the disk.
# TIERCTL names the tierctl binary (default: next to each tierd).
set -eu
[ $# -gt 0 ] || set -- target/release/tierd
PORT=${PORT:-10941}
RESERVE_MIB=256
SSD_MODEL=${SSD_MODEL:-ssd-sata}
HDD_MODEL=${HDD_MODEL:-hdd-5400}
STREAMS=${STREAMS:-1}
case "$STREAMS" in 1 | 2 | 4) ;; *) echo "daemon-landing: STREAMS must be 1, 2 or 4" >&2; exit 2 ;; esac
BURST_MIB=$((2 * RESERVE_MIB))
command -v fio >/dev/null || { echo "daemon-landing: fio is not installed" >&2; exit 1; }

# rates LOG...: "first after" MiB/s from fio bandwidth logs (ms, KiB/s), one
# per job, summed per 100 ms bin.
rates() {
    python3 - "$RESERVE_MIB" "$@" <<'EOF'
import sys
bins = {}
for path in sys.argv[2:]:
    for line in open(path):
        f = [x.strip() for x in line.split(",")]
        b = round(int(f[0]) / 100)
        bins[b] = bins.get(b, 0.0) + int(f[1]) / 1024.0  # MiB/s
rows = [(b / 10.0, bins[b]) for b in sorted(bins)]
reserve = float(sys.argv[1])
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
        --ssd-model "$SSD_MODEL" --hdd-model "$HDD_MODEL" --listen 127.0.0.1:$PORT --metrics-listen "" \
        --control "$dir/control.sock" >"$dir/log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do nbdinfo nbd://127.0.0.1:$PORT >/dev/null 2>&1 && break; sleep 0.2; done
    if ! kill -0 $pid 2>/dev/null; then
        echo "daemon-landing: tierd exited at start (port $PORT in use? set PORT): $(tail -n 3 "$dir/log")" >&2
        exit 1
    fi
    if [ "$kind" = hybrid ]; then
        fio --name=fill --ioengine=nbd --uri=nbd://127.0.0.1:$PORT --rw=write --bs=1m \
            --iodepth=4 --size=4g --output="$dir/fill.json" --output-format=json >/dev/null
        # The reserve is back when free SSD slots, or SSD extents whose HDD
        # copy is clean (each leaves by a mapping change when a write needs
        # its slot: how the reserve is kept while the data fits the HDD),
        # cover it.
        local cover="0 0"
        for _ in $(seq 1 300); do
            cover=$("$tierctl" --control "$dir/control.sock" status --json |
                python3 -c "import json,sys; r=json.load(sys.stdin)['reserve']; print(r['ssd_free_bytes'] >> 20, r['covered_bytes'] >> 20)")
            [ "${cover#* }" -ge "$RESERVE_MIB" ] && break
            sleep 1
        done
        echo "  $(basename "$bin") hybrid: before the burst, SSD free ${cover% *} MiB, reserve covered ${cover#* } MiB" >&2
    fi
    if [ "$kind" = hdd ]; then
        "$tierctl" --control "$dir/control.sock" pin 5GiB+${BURST_MIB}MiB --tier hdd >/dev/null
    fi
    fio --name=burst --ioengine=nbd --uri=nbd://127.0.0.1:$PORT --rw=write --bs=256k \
        --iodepth=$((4 / STREAMS)) --numjobs="$STREAMS" \
        --offset=5g --offset_increment=$((BURST_MIB / STREAMS))m --size=$((BURST_MIB / STREAMS))m \
        --write_bw_log="$dir/burst" --log_avg_msec=100 \
        --output="$dir/burst.json" --output-format=json >/dev/null
    kill -TERM $pid
    wait $pid 2>/dev/null || true
    rates "$dir"/burst_bw*.log
    rm -rf "$dir"
}

echo "daemon-landing: $SSD_MODEL + $HDD_MODEL, $STREAMS stream(s), ${BURST_MIB} MiB burst" >&2
printf '%-28s %-7s %12s %12s\n' binary volume "first MiB/s" "after MiB/s"
for bin in "$@"; do
    for kind in ${KINDS:-hybrid ssd hdd}; do
        read -r first after < <(one "$bin" "$kind")
        printf '%-28s %-7s %12s %12s\n' "$bin" "$kind" "$first" "$after"
    done
done
