#!/usr/bin/env bash
# Compare tierd with two reference NBD servers over fio's nbd engine
# (libnbd): nbdkit's file plugin (a pool of threads doing pread/pwrite) and
# qemu-nbd (coroutines on one thread, cache=writeback).
#
# All three serve image files on the same filesystem (page cache, no device
# model; tierd with tiering on). The test region [0, SIZE) of each export is
# pre-filled through NBD with the same fio job, then every job in
# benchmarks/fio/ runs against each server, ROUNDS times, the server order
# rotating from round to round since the VM is noisy. Ratios are tierd's
# IOPS over each reference's, from the means over rounds. Each row also
# reports each server's CPU time per request (user + system time of the
# server's process during the job, from /proc, over the job's requests; for
# tierd this includes its migrator and everything else it runs).
# With --baseline, a second tierd (another build: the one before a change)
# joins the rotation as the server "baseline", so that a change is measured
# against what it changed in the same run, as a ratio.
#
# Usage: benchmarks/fio-vs-nbdkit.sh [--quick] [--runtime S] [--rounds N]
#          [--size SIZE] [--json FILE] [--workdir DIR] [--keep]
#          [--tierd PATH] [--tierd-args "ARGS"] [--no-build]
#          [--jobs "job1 job2 ..."] [--servers "tierd nbdkit qemu-nbd"]
#          [--baseline PATH]
#   --quick        5 s per job instead of 20 s
#   --runtime S    seconds per job (default 20)
#   --rounds N     rounds of every job on both servers (default 2)
#   --size SIZE    test region, a size fio and truncate both accept (default 1g)
#   --json FILE    write every data point and the summary as JSON
#   --workdir DIR  where the images go (default: a new dir under /var/tmp)
#   --keep         keep the work directory (images, logs, fio outputs)
#   --tierd PATH   tierd binary (default target/release/tierd, built here)
#   --tierd-args A extra arguments for `tierd serve`, e.g. "--nbd-threads 0"
#   --no-build     do not run cargo build first
#   --jobs LIST    subset of job names (default: all eight)
#   --servers LIST subset of servers (default: tierd nbdkit qemu-nbd)
#   --baseline P   also serve with the tierd binary P ("baseline", same
#                  flags), another build to compare this one with
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
tierd_args=""
build=1
jobs="randread-4k-qd1 randread-4k-qd32 randwrite-4k-qd1 randwrite-4k-qd32 randread-64k-qd8 randrw-8k-qd16 seqread-1m-qd4 seqwrite-256k-qd4"
servers="tierd nbdkit qemu-nbd"
baseline_bin=""

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
        --tierd-args) tierd_args=${2?}; shift ;;
        --servers) servers=${2:?}; shift ;;
        --no-build) build=0 ;;
        --jobs) jobs=${2:?}; shift ;;
        --baseline) baseline_bin=${2:?}; shift ;;
        -h|--help) sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done

if [ -n "$baseline_bin" ]; then
    [ -x "$baseline_bin" ] || die "no tierd binary at $baseline_bin (--baseline)"
    case " $servers " in *" baseline "*) ;; *) servers="$servers baseline" ;; esac
fi
for s in $servers; do
    case "$s" in
        tierd|nbdkit|qemu-nbd) ;;
        baseline) [ -n "$baseline_bin" ] || die "the server baseline needs --baseline PATH" ;;
        *) die "unknown server $s (tierd, nbdkit, qemu-nbd, baseline)" ;;
    esac
done
case " $servers " in *" tierd "*) ;; *) die "--servers must include tierd" ;; esac
refs=$(for s in $servers; do [ "$s" = tierd ] || echo "$s"; done | xargs)
for t in fio jq $(for r in $refs; do [ "$r" = baseline ] || echo "$r"; done); do
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
mkdir -p "$workdir/tierd" "$workdir/baseline" "$workdir/out"
points="$workdir/points.jsonl"
: >"$points"

tierd_pid=""
baseline_pid=""
nbdkit_pid=""
qemu_pid=""
cleanup() {
    for p in $tierd_pid $baseline_pid $nbdkit_pid $qemu_pid; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in $tierd_pid $baseline_pid $nbdkit_pid $qemu_pid; do
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

# start_tierd NAME BINARY PORT: a tierd with the default geometry (4 GiB
# SSD + 32 GiB HDD, sparse image files) in $workdir/NAME, its pid in
# started_pid once it listens.
start_tierd() {
    # shellcheck disable=SC2086 # tierd_args is a list of arguments
    "$2" serve --data-dir "$workdir/$1" --listen "127.0.0.1:$3" $tierd_args \
        >"$workdir/$1.log" 2>&1 &
    started_pid=$!
    for _ in $(seq 600); do
        grep -q "serving NBD over TCP" "$workdir/$1.log" && break
        kill -0 "$started_pid" 2>/dev/null || { cat "$workdir/$1.log" >&2; die "$1 exited"; }
        sleep 0.1
    done
    grep -q "serving NBD over TCP" "$workdir/$1.log" || die "$1 did not start listening"
}
tierd_port=$(free_port 10811)
start_tierd tierd "$tierd_bin" "$tierd_port"
tierd_pid=$started_pid

# wait_port NAME PID PORT: until the server listens, or die with its log.
wait_port() {
    for _ in $(seq 600); do
        port_free "$3" || return 0
        kill -0 "$2" 2>/dev/null || { cat "$workdir/$1.log" >&2; die "$1 exited"; }
        sleep 0.1
    done
    die "$1 did not start listening"
}

# The references: one file each, as big as the test region, next to
# tierd's images.
nbdkit_port=$(free_port $((tierd_port + 1)))
qemu_port=$(free_port $((nbdkit_port + 1)))
baseline_port=$(free_port $((qemu_port + 1)))
case " $servers " in *" baseline "*)
    start_tierd baseline "$baseline_bin" "$baseline_port"
    baseline_pid=$started_pid
esac
case " $servers " in *" nbdkit "*)
    truncate -s "$size" "$workdir/nbdkit.img"
    nbdkit -f -i 127.0.0.1 -p "$nbdkit_port" --exit-with-parent \
        file "$workdir/nbdkit.img" >"$workdir/nbdkit.log" 2>&1 &
    nbdkit_pid=$!
    wait_port nbdkit "$nbdkit_pid" "$nbdkit_port"
esac
case " $servers " in *" qemu-nbd "*)
    truncate -s "$size" "$workdir/qemu-nbd.img"
    qemu-nbd -f raw -b 127.0.0.1 -p "$qemu_port" --persistent --shared=16 \
        --cache=writeback "$workdir/qemu-nbd.img" >"$workdir/qemu-nbd.log" 2>&1 &
    qemu_pid=$!
    wait_port qemu-nbd "$qemu_pid" "$qemu_port"
esac

uri_of() {
    case "$1" in
        tierd) echo "nbd://127.0.0.1:$tierd_port" ;;
        nbdkit) echo "nbd://127.0.0.1:$nbdkit_port" ;;
        qemu-nbd) echo "nbd://127.0.0.1:$qemu_port" ;;
        baseline) echo "nbd://127.0.0.1:$baseline_port" ;;
    esac
}

pid_of() {
    case "$1" in
        tierd) echo "$tierd_pid" ;;
        nbdkit) echo "$nbdkit_pid" ;;
        qemu-nbd) echo "$qemu_pid" ;;
        baseline) echo "$baseline_pid" ;;
    esac
}

# cpu_ticks PID: user + system clock ticks of a process (all its threads).
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
clk_tck=$(getconf CLK_TCK)

# run_fio SERVER JOB ROUND RUNTIME -> fio JSON in $workdir/out
run_fio() {
    local server=$1 job=$2 round=$3 rt=$4 out pid ticks0 ticks
    out="$workdir/out/$round-$job-$server.json"
    pid=$(pid_of "$server")
    ticks0=$(cpu_ticks "$pid")
    if ! NBD_URI=$(uri_of "$server") SIZE=$size RUNTIME=$rt \
        fio --output-format=json --output="$out" "$fiodir/$job.fio"; then
        cat "$out" >&2 || true
        die "fio $job against $server failed"
    fi
    for p in $tierd_pid $baseline_pid $nbdkit_pid $qemu_pid; do
        kill -0 "$p" 2>/dev/null || die "a server died during $job against $server (logs in $workdir)"
    done
    ticks=$(($(cpu_ticks "$pid") - ticks0))
    # IOPS and bandwidth add both directions (the mixed job has both);
    # latency is that of the direction with more I/O.
    jq -c --arg server "$server" --arg job "$job" --argjson round "$round" \
        --argjson ticks "$ticks" --argjson tck "$clk_tck" '
        .jobs[0] as $j
        | if $j.error != 0 then error("fio job error \($j.error)") else . end
        | (if $j.read.total_ios >= $j.write.total_ios then $j.read else $j.write end) as $d
        | {server: $server, job: $job, round: $round,
           iops: ($j.read.iops + $j.write.iops),
           mib_s: (($j.read.bw_bytes + $j.write.bw_bytes) / 1048576),
           lat_mean_us: ($d.clat_ns.mean / 1000),
           lat_p99_us: (($d.clat_ns.percentile["99.000000"] // 0) / 1000),
           ios: ($j.read.total_ios + $j.write.total_ios), runtime_ms: $d.runtime,
           cpu_s: ($ticks / $tck),
           cpu_us_per_io: ($ticks / $tck * 1e6 / ([$j.read.total_ios + $j.write.total_ios, 1] | max))}' "$out" >>"$points"
    jq -r '"  \(.job) \(.server) round \(.round): \(.iops | floor) IOPS, \(.mib_s * 10 | round / 10) MiB/s, \(.cpu_us_per_io | round) us CPU/request"' \
        <<<"$(tail -n1 "$points")" >&2
}

echo "== servers: $(for s in $servers; do printf '%s %s  ' "$s" "$(uri_of "$s")"; done)work dir $workdir" >&2
echo "== pre-filling [0, $size) of every export through NBD" >&2
for s in $servers; do
    NBD_URI=$(uri_of "$s") SIZE=$size fio --output-format=terse \
        --output="$workdir/out/prefill-$s.txt" "$fiodir/prefill.fio" ||
        die "pre-fill of $s failed"
done

# rotate N WORDS...: the words rotated left N times.
rotate() {
    local n=$1; shift
    local a=("$@") i k
    k=$((n % ${#a[@]}))
    for i in "${!a[@]}"; do printf '%s ' "${a[$(((i + k) % ${#a[@]}))]}"; done
}

for r in $(seq "$rounds"); do
    # shellcheck disable=SC2086
    order=$(rotate $((r - 1)) $servers | xargs)
    echo "== round $r/$rounds ($order), ${runtime}s per job" >&2
    for job in $jobs; do
        for s in $order; do
            run_fio "$s" "$job" "$r" "$runtime"
        done
    done
done

summary=$(jq -s -c --arg jobs "$jobs" --arg refs "$refs" '
    def mean: add / length;
    ($jobs | split(" ")) as $order
    | ($refs | split(" ") | map(select(. != ""))) as $refs
    | group_by(.job)
    | map(. as $g
        | ($g | map(select(.server == "tierd"))) as $t
        | {job: $g[0].job,
           tierd_iops: ($t | map(.iops) | mean), tierd_mib_s: ($t | map(.mib_s) | mean),
           tierd_cpu_us_per_io: ($t | map(.cpu_us_per_io) | mean),
           tierd_iops_min: ($t | map(.iops) | min), tierd_iops_max: ($t | map(.iops) | max)}
        | .refs = ($refs | map(. as $r | ($g | map(select(.server == $r))) as $n
            | {server: $r, iops: ($n | map(.iops) | mean), mib_s: ($n | map(.mib_s) | mean),
               cpu_us_per_io: ($n | map(.cpu_us_per_io) | mean),
               iops_min: ($n | map(.iops) | min), iops_max: ($n | map(.iops) | max)}))
        | .tierd_iops as $ti
        | .refs |= map(.ratio = ($ti / .iops))
        | .ratio = (.refs | map(.ratio) | min))
    | sort_by(.job as $x | $order | index($x))' "$points")

echo
echo "runtime ${runtime}s per job, $rounds rounds (server order rotating), region $size, mean over rounds"
[ -n "$tierd_args" ] && echo "tierd serve $tierd_args"
echo
header="| job | tierd IOPS | tierd MiB/s |"
rule="|---|---:|---:|"
for r in $refs; do
    header="$header $r IOPS | tierd/$r |"
    rule="$rule---:|---:|"
done
echo "$header"
echo "$rule"
jq -r '.[] | "| \(.job) | \(.tierd_iops | round) | \(.tierd_mib_s * 10 | round / 10) |"
    + (.refs | map(" \(.iops | round) | \(.ratio * 100 | round / 100)\(if .ratio < 1 then " (below 1.0)" else "" end) |") | join(""))' <<<"$summary"
echo
echo "server CPU time per request (user + system, us):"
echo
header="| job | tierd |"
rule="|---|---:|"
for r in $refs; do
    header="$header $r | tierd/$r |"
    rule="$rule---:|---:|"
done
echo "$header"
echo "$rule"
jq -r '.[] | .tierd_cpu_us_per_io as $t
    | "| \(.job) | \($t * 10 | round / 10) |"
    + (.refs | map(" \(.cpu_us_per_io * 10 | round / 10) | \(if .cpu_us_per_io > 0 then ($t / .cpu_us_per_io * 100 | round / 100 | tostring) + "x" else "-" end) |") | join(""))' <<<"$summary"
echo
below=$(jq -r '[.[] | select(.ratio < 1)] | length' <<<"$summary")
echo "rows where tierd trails a reference: $below of $(jq length <<<"$summary")"
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
        --arg nbdkit "$(command -v nbdkit >/dev/null && nbdkit --version | head -n1)" \
        --arg qemu "$(command -v qemu-nbd >/dev/null && qemu-nbd --version | head -n1)" \
        --arg tierd_args "$tierd_args" \
        --arg commit "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
        --arg size "$size" --argjson runtime "$runtime" --argjson rounds "$rounds" \
        '{meta: {date: $date, host: $host, cpu: $cpu, nproc: $nproc, fio: $fio,
                 nbdkit: $nbdkit, qemu_nbd: $qemu, tierd_args: $tierd_args,
                 tierd_commit: $commit, region: $size,
                 runtime_s: $runtime, rounds: $rounds},
          summary: $summary, points: .}' "$points" >"$json_out"
    echo "JSON written to $json_out" >&2
fi
