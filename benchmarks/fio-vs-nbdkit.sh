#!/usr/bin/env bash
# Compare tierd with nbdkit's file plugin over fio's nbd engine (libnbd).
#
# Both servers run from image files on the same filesystem (page cache, no
# device model). The test region [0, SIZE) of both exports is pre-filled
# through NBD with the same fio job, then every job in benchmarks/fio/ runs
# against both, ROUNDS times, interleaved A/B then B/A, since the VM is noisy.
#
# Usage: benchmarks/fio-vs-nbdkit.sh [--quick] [--runtime S] [--rounds N]
#          [--size SIZE] [--json FILE] [--workdir DIR] [--keep]
#          [--tierd PATH] [--no-build] [--jobs "job1 job2 ..."]
#   --quick        5 s per job instead of 20 s
#   --runtime S    seconds per job (default 20)
#   --rounds N     rounds of every job on both servers (default 2)
#   --size SIZE    test region, a size fio and truncate both accept (default 1g)
#   --json FILE    write every data point and the summary as JSON
#   --workdir DIR  where the images go (default: a new dir under /var/tmp)
#   --keep         keep the work directory (images, logs, fio outputs)
#   --tierd PATH   tierd binary (default target/release/tierd, built here)
#   --no-build     do not run cargo build first
#   --jobs LIST    subset of job names (default: all four)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
fiodir="$here/fio"

runtime=20
rounds=2
size=1g
json_out=""
workdir=""
keep=0
tierd_bin=""
build=1
jobs="randread-4k-qd1 randread-4k-qd32 randwrite-4k-qd32 seqwrite-256k-qd4"

die() { echo "fio-vs-nbdkit: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --quick) runtime=5 ;;
        --runtime) runtime=${2:?}; shift ;;
        --rounds) rounds=${2:?}; shift ;;
        --size) size=${2:?}; shift ;;
        --json) json_out=${2:?}; shift ;;
        --workdir) workdir=${2:?}; shift ;;
        --keep) keep=1 ;;
        --tierd) tierd_bin=${2:?}; shift ;;
        --no-build) build=0 ;;
        --jobs) jobs=${2:?}; shift ;;
        -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done

for t in fio nbdkit jq; do
    command -v "$t" >/dev/null || die "$t is not installed"
done
for j in $jobs prefill; do
    [ -f "$fiodir/$j.fio" ] || die "no job file $fiodir/$j.fio"
done
[ -n "$json_out" ] && json_out=$(realpath -m "$json_out")

if [ -z "$tierd_bin" ]; then
    tierd_bin="$root/target/release/tierd"
    if [ "$build" = 1 ]; then
        echo "== cargo build --release -p tierd-daemon" >&2
        (cd "$root" && cargo build --release -p tierd-daemon) >&2
    fi
fi
[ -x "$tierd_bin" ] || die "no tierd binary at $tierd_bin (build it: cargo build --release --workspace)"

if [ -z "$workdir" ]; then
    workdir=$(mktemp -d /var/tmp/tierd-bench.XXXXXX)
else
    mkdir -p "$workdir"
fi
workdir=$(realpath "$workdir")
mkdir -p "$workdir/tierd" "$workdir/out"
points="$workdir/points.jsonl"
: >"$points"

tierd_pid=""
nbdkit_pid=""
cleanup() {
    for p in $tierd_pid $nbdkit_pid; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in $tierd_pid $nbdkit_pid; do
        wait "$p" 2>/dev/null || true
    done
    if [ "$keep" = 1 ]; then
        echo "work directory kept: $workdir" >&2
    else
        rm -rf "$workdir"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
    local p
    for p in $(seq "$1" $(($1 + 200))); do
        if port_free "$p"; then echo "$p"; return; fi
    done
    die "no free port from $1"
}

# tierd: default geometry (4 GiB SSD + 32 GiB HDD, sparse image files).
tierd_port=$(free_port 10811)
"$tierd_bin" serve --data-dir "$workdir/tierd" --listen "127.0.0.1:$tierd_port" \
    >"$workdir/tierd.log" 2>&1 &
tierd_pid=$!
for _ in $(seq 600); do
    grep -q "serving NBD over TCP" "$workdir/tierd.log" && break
    kill -0 "$tierd_pid" 2>/dev/null || { cat "$workdir/tierd.log" >&2; die "tierd exited"; }
    sleep 0.1
done
grep -q "serving NBD over TCP" "$workdir/tierd.log" || die "tierd did not start listening"

# nbdkit: one file as big as the test region, next to tierd's images.
truncate -s "$size" "$workdir/nbdkit.img"
nbdkit_port=$(free_port $((tierd_port + 1)))
nbdkit -f -i 127.0.0.1 -p "$nbdkit_port" --exit-with-parent \
    file "$workdir/nbdkit.img" >"$workdir/nbdkit.log" 2>&1 &
nbdkit_pid=$!
for _ in $(seq 600); do
    port_free "$nbdkit_port" || break
    kill -0 "$nbdkit_pid" 2>/dev/null || { cat "$workdir/nbdkit.log" >&2; die "nbdkit exited"; }
    sleep 0.1
done

uri_of() {
    case "$1" in
        tierd) echo "nbd://127.0.0.1:$tierd_port" ;;
        nbdkit) echo "nbd://127.0.0.1:$nbdkit_port" ;;
    esac
}

# run_fio SERVER JOB ROUND RUNTIME -> fio JSON in $workdir/out
run_fio() {
    local server=$1 job=$2 round=$3 rt=$4 out
    out="$workdir/out/$round-$job-$server.json"
    if ! NBD_URI=$(uri_of "$server") SIZE=$size RUNTIME=$rt \
        fio --output-format=json --output="$out" "$fiodir/$job.fio"; then
        cat "$out" >&2 || true
        die "fio $job against $server failed"
    fi
    for p in $tierd_pid $nbdkit_pid; do
        kill -0 "$p" 2>/dev/null || die "a server died during $job against $server (logs in $workdir)"
    done
    jq -c --arg server "$server" --arg job "$job" --argjson round "$round" '
        .jobs[0] as $j
        | (if ($job | test("read")) then $j.read else $j.write end) as $d
        | if $j.error != 0 then error("fio job error \($j.error)") else . end
        | {server: $server, job: $job, round: $round,
           iops: $d.iops, mib_s: ($d.bw_bytes / 1048576),
           lat_mean_us: ($d.clat_ns.mean / 1000),
           lat_p99_us: (($d.clat_ns.percentile["99.000000"] // 0) / 1000),
           ios: $d.total_ios, runtime_ms: $d.runtime}' "$out" >>"$points"
    jq -r '"  \(.job) \(.server) round \(.round): \(.iops | floor) IOPS, \(.mib_s * 10 | round / 10) MiB/s"' \
        <<<"$(tail -n1 "$points")" >&2
}

echo "== tierd on :$tierd_port, nbdkit on :$nbdkit_port, work dir $workdir" >&2
echo "== pre-filling [0, $size) of both exports through NBD" >&2
for s in tierd nbdkit; do
    NBD_URI=$(uri_of "$s") SIZE=$size fio --output-format=terse \
        --output="$workdir/out/prefill-$s.txt" "$fiodir/prefill.fio" ||
        die "pre-fill of $s failed"
done

for r in $(seq "$rounds"); do
    if [ $((r % 2)) = 1 ]; then order="tierd nbdkit"; else order="nbdkit tierd"; fi
    echo "== round $r/$rounds ($order), ${runtime}s per job" >&2
    for job in $jobs; do
        for s in $order; do
            run_fio "$s" "$job" "$r" "$runtime"
        done
    done
done

summary=$(jq -s -c --arg jobs "$jobs" '
    def mean: add / length;
    ($jobs | split(" ")) as $order
    | group_by(.job)
    | map(. as $g
        | ($g | map(select(.server == "tierd"))) as $t
        | ($g | map(select(.server == "nbdkit"))) as $n
        | {job: $g[0].job,
           tierd_iops: ($t | map(.iops) | mean), tierd_mib_s: ($t | map(.mib_s) | mean),
           tierd_iops_min: ($t | map(.iops) | min), tierd_iops_max: ($t | map(.iops) | max),
           nbdkit_iops: ($n | map(.iops) | mean), nbdkit_mib_s: ($n | map(.mib_s) | mean),
           nbdkit_iops_min: ($n | map(.iops) | min), nbdkit_iops_max: ($n | map(.iops) | max)}
        | .ratio = (.tierd_iops / .nbdkit_iops))
    | sort_by(.job as $x | $order | index($x))' "$points")

echo
echo "runtime ${runtime}s per job, $rounds rounds (interleaved), region $size, mean over rounds"
echo
echo "| job | tierd IOPS | tierd MiB/s | nbdkit IOPS | nbdkit MiB/s | tierd/nbdkit |"
echo "|---|---:|---:|---:|---:|---:|"
jq -r '.[] | "| \(.job) | \(.tierd_iops | round) | \(.tierd_mib_s * 10 | round / 10) | \(.nbdkit_iops | round) | \(.nbdkit_mib_s * 10 | round / 10) | \(.ratio * 100 | round / 100)\(if .ratio < 1 then " (below 1.0)" else "" end) |"' <<<"$summary"
echo
echo "per round (IOPS):"
jq -r -s 'sort_by(.job, .round, .server)[] | "  round \(.round) \(.job) \(.server): \(.iops | round)  (mean lat \(.lat_mean_us | round) us, p99 \(.lat_p99_us | round) us)"' "$points"

if [ -n "$json_out" ]; then
    jq -s --argjson summary "$summary" \
        --arg date "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
        --arg host "$(uname -srm)" \
        --arg cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')" \
        --argjson nproc "$(nproc)" \
        --arg fio "$(fio --version)" \
        --arg nbdkit "$(nbdkit --version | head -n1)" \
        --arg commit "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
        --arg size "$size" --argjson runtime "$runtime" --argjson rounds "$rounds" \
        '{meta: {date: $date, host: $host, cpu: $cpu, nproc: $nproc, fio: $fio,
                 nbdkit: $nbdkit, tierd_commit: $commit, region: $size,
                 runtime_s: $runtime, rounds: $rounds},
          summary: $summary, points: .}' "$points" >"$json_out"
    echo "JSON written to $json_out" >&2
fi
