#!/usr/bin/env bash
# What heat tracking costs: tierd with tiering on (the default: heat recorded
# on every request, the migrator running) against tiering off
# (TIERD_HEAT__ENABLED=false, TIERD_MIGRATE__ENABLED=false), side by side,
# over fio's nbd engine, image files in the page cache, no device model.
#
# Two data directories are prepared the same way (a 1 GiB region written
# through NBD). The configurations swap directories every round and the
# order alternates (on/off, off/on), so neither the images' page-cache
# state nor the VM's noise lands on one side only: an earlier one-directory
# A/B showed a 20 % "cost" that followed the directory, not heat.
#
# Usage: benchmarks/heat-cost.sh [--runtime S] [--rounds N] [--no-build]
#          [--tierd PATH] [--workdir DIR] [--keep] [--json FILE]
#   --runtime S    seconds per fio run (default 10)
#   --rounds N     rounds; each runs every job once per configuration (default 4)
#   --no-build     do not run cargo build first
#   --tierd PATH   tierd binary (default target/release/tierd)
#   --workdir DIR  where the data directories go (default: new dir in /var/tmp)
#   --keep         keep the work directory
#   --json FILE    write the data points and the summary as JSON
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
runtime=10
rounds=4
build=1
tierd_bin=""
workdir=""
keep=0
json_out=""
jobs="randread randwrite"

die() { echo "heat-cost: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --runtime) runtime=${2:?}; shift ;;
        --rounds) rounds=${2:?}; shift ;;
        --no-build) build=0 ;;
        --tierd) tierd_bin=${2:?}; shift ;;
        --workdir) workdir=${2:?}; shift ;;
        --keep) keep=1 ;;
        --json) json_out=${2:?}; shift ;;
        -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done

for t in fio jq; do
    command -v "$t" >/dev/null || die "$t is not installed"
done
if [ -z "$tierd_bin" ]; then
    tierd_bin="$root/target/release/tierd"
    if [ "$build" = 1 ]; then
        (cd "$root" && cargo build --release --bin tierd) >&2
    fi
fi
[ -x "$tierd_bin" ] || die "no tierd binary at $tierd_bin"
[ -n "$workdir" ] || workdir=$(mktemp -d /var/tmp/tierd-heat-cost.XXXXXX)
mkdir -p "$workdir"

pid=""
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
    [ "$keep" = 1 ] || rm -rf "$workdir"
}
trap cleanup EXIT

port=10871
# start DIR on|off: serve DIR in the background on $port.
start() {
    local dir=$1 mode=$2
    local env=()
    if [ "$mode" = off ]; then
        env=(TIERD_HEAT__ENABLED=false TIERD_MIGRATE__ENABLED=false)
    fi
    env "${env[@]}" "$tierd_bin" serve --data-dir "$dir" --listen "127.0.0.1:$port" \
        --metrics-listen "" --control "" --log-level warn >"$dir.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do
        if nbdinfo --size "nbd://127.0.0.1:$port" >/dev/null 2>&1; then return 0; fi
        kill -0 "$pid" 2>/dev/null || die "tierd exited: $(tail -3 "$dir.log")"
        sleep 0.1
    done
    die "tierd did not start serving"
}
stop() {
    kill "$pid" && wait "$pid" 2>/dev/null || true
    pid=""
}
# fio_run rw: IOPS of one 4 KiB QD 32 run over the 1 GiB region.
fio_run() {
    local rw=$1 out="$workdir/fio.json"
    fio --name=heat --ioengine=nbd --uri="nbd://127.0.0.1:$port" --rw="$rw" \
        --bs=4k --size=1g --iodepth=32 --time_based --runtime="$runtime" \
        --output-format=json --output="$out" >/dev/null 2>&1 || die "fio failed"
    local dir=read
    [ "$rw" = randwrite ] && dir=write
    jq ".jobs[0].$dir.iops | floor" "$out"
}

echo "preparing two data directories in $workdir" >&2
for d in A B; do
    start "$workdir/$d" on
    fio --name=fill --ioengine=nbd --uri="nbd://127.0.0.1:$port" --rw=write --bs=1m \
        --size=1g --iodepth=4 >/dev/null 2>&1 || die "fill failed"
    stop
done

points="$workdir/points.txt"
: >"$points"
for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) = 1 ]; then
        order="on:A off:B"
    else
        order="off:A on:B"
    fi
    for job in $jobs; do
        for cfg in $order; do
            mode=${cfg%%:*}
            dir=${cfg##*:}
            start "$workdir/$dir" "$mode"
            iops=$(fio_run "$job")
            stop
            echo "$r $job $mode $dir $iops" | tee -a "$points" >&2
        done
    done
done

summary=$(awk '
    { s[$2" "$3] += $5; n[$2" "$3]++ }
    END {
        split("randread randwrite", jobs, " ")
        for (i = 1; i <= 2; i++) {
            j = jobs[i]
            on = s[j" on"] / n[j" on"]; off = s[j" off"] / n[j" off"]
            printf "%s %.0f %.0f %.3f\n", j, on, off, on / off
        }
    }' "$points")
echo
printf "%-10s %12s %12s %10s\n" job "heat on" "tiering off" "on/off"
echo "$summary" | while read -r j on off ratio; do
    printf "%-10s %12s %12s %10s\n" "$j" "$on" "$off" "$ratio"
done
if [ -n "$json_out" ]; then
    jq -n --rawfile p "$points" --rawfile s <(echo "$summary") '{
        points: ($p | split("\n") | map(select(length > 0) | split(" ")
                 | {round: .[0] | tonumber, job: .[1], heat: .[2], dir: .[3], iops: .[4] | tonumber})),
        summary: ($s | split("\n") | map(select(length > 0) | split(" ")
                 | {job: .[0], heat_on: .[1] | tonumber, tiering_off: .[2] | tonumber, ratio: .[3] | tonumber}))
    }' >"$json_out"
fi
