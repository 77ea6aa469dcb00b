#!/usr/bin/env bash
# What a volume's size costs the daemon when it does nothing and when it
# does a little: for each size (in 1 MiB extents; the SSD is 1/16 of it, the
# HDD the rest, both sparse image files), format, serve, and measure
#
#   - resident memory fresh and idle (before any write), after a scattered
#     1 % of the extents was written (one write of --write-size in each
#     chosen extent, by fio's nbd engine), and just after a restart;
#     bytes per extent (resident memory / the volume's extents);
#   - idle CPU: the daemon's own utime+stime (/proc/PID/stat) over an idle
#     window, as CPU seconds per minute and % of one core, and the
#     migrator thread's CPU per planning round (tierd-migrate's ticks over
#     the rounds `tierctl status` counts);
#   - the same over the busy window right after the writes, plus rounds
#     per second, the busiest second of the migrator thread, and the moves
#     and pre-cleanings (new SSD data given an HDD copy) done meanwhile
#     (the daemon counts rounds but does not say how long one takes: when
#     rounds run back to back, CPU per round is about a round's time);
#   - start-up time after a clean stop (SIGTERM, the stop's own time too)
#     and after kill -9: until the NBD port serves (nbdinfo) and `tierctl
#     status` answers;
#   - the metadata directory's size on disk (du), fresh and after the
#     writes and a clean stop;
#   - `tierctl status` and `tierctl placement --map` answer times (median
#     of 3, after the writes).
#
# A human table goes to stdout, progress to stderr, and with --json FILE
# every number to FILE (benchmarks/scale-chart.py draws it).
#
# Usage: benchmarks/scale.sh [--sizes 1M,4M,16M] [--bin DIR] [--workdir DIR]
#          [--idle S] [--busy S] [--settle S] [--write-size BYTES]
#          [--port N] [--keep] [--json FILE]
#   --sizes LIST     volume sizes in extents: N, NK (x1024) or NM (x1048576)
#                    (default 1M,4M,16M; 16M is 1 TiB SSD + 15 TiB HDD, the
#                    largest one image file on ext4 with 4 KiB blocks allows)
#   --bin DIR        where tierd and tierctl are (default ./target/release)
#   --workdir DIR    where the images go (default: a new dir under /tmp,
#                    removed at the end unless --keep)
#   --idle S         idle window in seconds (default 30)
#   --busy S         window after the writes in seconds (default 60)
#   --settle S       wait after a start before measuring (default 5)
#   --write-size N   bytes written in each touched extent (default 4096)
#   --port N         NBD port on 127.0.0.1 (default 12809)
#   --keep           keep the work directory (images, logs, write lists)
#   --json FILE      write every number as JSON
# Needs fio (nbd engine), nbdinfo, jq. Takes about 2.5 minutes per size
# with the defaults, plus the daemon's own start and stop times.
#
# benchmarks/scale.sh --full [ARGS]: a volume filled to the brim instead
# (benchmarks/scale-full.sh, which --full ARGS go to; --help there).
set -euo pipefail

for a in "$@"; do
    if [ "$a" = --full ]; then
        rest=()
        for b in "$@"; do
            [ "$b" = --full ] || rest+=("$b")
        done
        exec "$(dirname "$0")/scale-full.sh" "${rest[@]}"
    fi
done

sizes="1M,4M,16M"
bindir="./target/release"
workdir=""
idle=30
busy=60
settle=5
write_size=4096
port=12809
keep=0
json_out=""

die() { echo "scale: $*" >&2; exit 1; }
log() { echo "scale: $*" >&2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --sizes) sizes=${2:?--sizes needs a list}; shift ;;
        --bin) bindir=${2:?--bin needs a directory}; shift ;;
        --workdir) workdir=${2:?--workdir needs a directory}; shift ;;
        --idle) idle=${2:?--idle needs seconds}; shift ;;
        --busy) busy=${2:?--busy needs seconds}; shift ;;
        --settle) settle=${2:?--settle needs seconds}; shift ;;
        --write-size) write_size=${2:?--write-size needs bytes}; shift ;;
        --port) port=${2:?--port needs a number}; shift ;;
        --keep) keep=1 ;;
        --json) json_out=${2:?--json needs a file}; shift ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done

for n in "$idle" "$busy" "$settle" "$write_size" "$port"; do
    [[ "$n" =~ ^[0-9]+$ ]] || die "not a whole number: $n"
done
if [ "$idle" -lt 1 ] || [ "$busy" -lt 1 ]; then
    die "--idle and --busy need at least 1 s"
fi
if [ "$write_size" -lt 512 ] || [ "$write_size" -gt 1048576 ] || [ $((write_size % 512)) != 0 ]; then
    die "--write-size must be a multiple of 512 between 512 and 1048576"
fi
for t in fio nbdinfo jq awk du getconf; do
    command -v "$t" >/dev/null || die "$t is not installed"
done
tierd="$bindir/tierd"
tierctl="$bindir/tierctl"
[ -x "$tierd" ] || die "no tierd at $tierd (build with cargo build --release, or pass --bin DIR)"
[ -x "$tierctl" ] || die "no tierctl at $tierctl (pass --bin DIR)"
if [ -n "$json_out" ]; then
    : >"$json_out" || die "cannot write $json_out"
fi

# extents_of, now, elapsed, ctl, status_json, mapped, start, stop_clean.
# shellcheck source=benchmarks/scale-lib.sh
source "$(dirname "$0")/scale-lib.sh"
size_list=()
IFS=, read -r -a size_tokens <<<"$sizes"
for s in "${size_tokens[@]}"; do
    e=$(extents_of "$s") || die "not a size in extents: $s (e.g. 1M, 256K, 65536)"
    [ "$e" -ge 1024 ] || die "$s: at least 1K extents (the SSD is 1/16 of the volume)"
    size_list+=("$s")
done
[ "${#size_list[@]}" -gt 0 ] || die "no sizes given"

if [ -z "$workdir" ]; then
    workdir=$(mktemp -d /tmp/tierd-scale.XXXXXX)
else
    mkdir -p "$workdir"
fi
pid=""
cleanup() {
    if [ -n "$pid" ]; then
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    if [ "$keep" = 1 ]; then
        log "kept $workdir"
    else
        rm -rf "$workdir"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

hz=$(getconf CLK_TCK)

# cpu_ticks PID: utime+stime of the whole process, in clock ticks.
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; }
# migrator_ticks PID: the same for the tierd-migrate thread ("" if none).
migrator_ticks() {
    local t
    for t in /proc/"$1"/task/*; do
        if [ "$(cat "$t/comm" 2>/dev/null)" = tierd-migrate ]; then
            sed 's/^.*) //' "$t/stat" | awk '{ print $12 + $13 }'
            return 0
        fi
    done
    echo ""
}
# rss_kib PID FIELD: VmRSS or VmHWM in KiB.
rss_kib() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"; }
du_bytes() { du -sb "$1" | awk '{ print $1 }'; }

rounds() { status_json | jq '.migration.rounds'; }
moves() { status_json | jq '.migration.promotions + .migration.demotions'; }
precleaned() { status_json | jq '.shadows.precleaned // 0'; }

stop_kill() {
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null || true
    pid=""
}

# window S: CPU over S seconds of the running daemon, sampled each second.
# Sets win_ticks, win_mig_ticks, win_rounds, win_moves, win_precleaned
# (SSD extents given an HDD copy) and win_peak_mig (the migrator thread's
# busiest second, in ticks).
window() {
    local secs=$1 c0 m0 r0 v0 p0 prev cur i
    c0=$(cpu_ticks "$pid")
    m0=$(migrator_ticks "$pid")
    r0=$(rounds)
    v0=$(moves)
    p0=$(precleaned)
    win_peak_mig=0
    prev=$m0
    for ((i = 0; i < secs; i++)); do
        sleep 1
        cur=$(migrator_ticks "$pid")
        if [ -n "$cur" ] && [ -n "$prev" ] && [ $((cur - prev)) -gt "$win_peak_mig" ]; then
            win_peak_mig=$((cur - prev))
        fi
        prev=$cur
    done
    win_ticks=$(($(cpu_ticks "$pid") - c0))
    cur=$(migrator_ticks "$pid")
    if [ -n "$m0" ] && [ -n "$cur" ]; then
        win_mig_ticks=$((cur - m0))
    else
        win_mig_ticks=""
    fi
    win_rounds=$(($(rounds) - r0))
    win_moves=$(($(moves) - v0))
    win_precleaned=$(($(precleaned) - p0))
}

# median3 CMD...: median wall time in seconds of three runs of CMD.
median3() {
    local t0 i times=()
    for i in 1 2 3; do
        t0=$(now)
        "$@" >/dev/null || die "failed: $*"
        times+=("$(elapsed "$t0")")
    done
    printf '%s\n' "${times[@]}" | sort -g | sed -n 2p
}

# write_list EXTENTS FILE: a fio iolog writing $write_size bytes at a
# random block of one random extent in each run of 100 extents (1 %,
# spread over the whole volume; the same list for the same size). Then 32
# reads: fio 3.33's nbd engine ends a replay with up to a queue depth of
# the last requests never sent, though it counts them done (nbdkit's log
# filter shows the same: 190 of 200 writes arrived), so the writes must
# not come last.
write_list() {
    local n=$1 file=$2
    awk -v n="$n" -v ws="$write_size" -v seed=28 'BEGIN {
        srand(seed)
        k = int(n / 100); if (k < 1) k = 1
        stride = int(n / k)
        blocks = int(1048576 / ws)
        print "fio version 2 iolog"
        print "nbd add"
        print "nbd open"
        for (i = 0; i < k; i++) {
            e = i * stride + int(rand() * stride)
            printf "nbd write %.0f %d\n", e * 1048576 + int(rand() * blocks) * ws, ws
        }
        for (i = 0; i < 32; i++) printf "nbd read 0 %d\n", ws
    }' >"$file"
}

results="$workdir/results.jsonl"
: >"$results"
machine="$(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(uname -r), $(stat -f -c %T "$workdir") at $workdir"
version=$("$tierd" --version 2>/dev/null || echo unknown)
log "$version, $machine; sizes ${size_list[*]}; idle ${idle} s, busy ${busy} s"

for s in "${size_list[@]}"; do
    total=$(extents_of "$s")
    ssd_mib=$((total / 16))
    hdd_mib=$((total - ssd_mib))
    data="$workdir/data-$s"
    size_t0=$(now)
    log "$s: formatting ${ssd_mib} MiB SSD + ${hdd_mib} MiB HDD (sparse) in $data"
    t0=$(now)
    "$tierd" format --data-dir "$data" --ssd-size "${ssd_mib}MiB" --hdd-size "${hdd_mib}MiB" \
        --json >"$data.format.json" 2>"$data.format.log" ||
        die "format failed for $s: $(tail -3 "$data.format.log")"
    format_s=$(elapsed "$t0")

    start serve
    start_first_s=$ready_s
    vol_extents=$(status_json | jq '.capacity_bytes / .extent_size | floor')
    log "$s: serving $vol_extents extents after ${start_first_s} s; settling ${settle} s"
    sleep "$settle"
    rss_idle=$(rss_kib "$pid" VmRSS)
    meta_fresh=$(du_bytes "$data/meta")

    log "$s: idle window ${idle} s"
    window "$idle"
    idle_ticks=$win_ticks idle_mig=$win_mig_ticks idle_rounds=$win_rounds

    write_list "$vol_extents" "$data.iolog"
    writes=$(grep -c "^nbd write" "$data.iolog")
    log "$s: writing $write_size B in each of $writes extents"
    t0=$(now)
    fio --name=scatter --ioengine=nbd --uri="nbd://127.0.0.1:$port" --read_iolog="$data.iolog" \
        --rw=write --bs="$write_size" --iodepth=16 --output-format=json \
        --output="$data.fio.json" >/dev/null 2>"$data.fio.log" ||
        die "fio failed for $s: $(tail -3 "$data.fio.log")"
    write_s=$(elapsed "$t0")
    done_ios=$(jq '.jobs[0].write.total_ios' "$data.fio.json")
    [ "$done_ios" = "$writes" ] || die "fio wrote $done_ios of $writes requests"

    log "$s: busy window ${busy} s"
    window "$busy"
    busy_ticks=$win_ticks busy_mig=$win_mig_ticks busy_rounds=$win_rounds
    busy_moves=$win_moves busy_peak=$win_peak_mig busy_precleaned=$win_precleaned
    rss_after=$(rss_kib "$pid" VmRSS)
    hwm=$(rss_kib "$pid" VmHWM)
    mapped_before=$(mapped)
    status_s=$(median3 ctl status)
    map_s=$(median3 ctl placement --map)

    log "$s: clean stop and start"
    stop_clean
    meta_after=$(du_bytes "$data/meta")
    start serve
    start_clean_s=$ready_s
    sleep 2
    rss_restart=$(rss_kib "$pid" VmRSS)

    log "$s: kill -9 and start"
    stop_kill
    start serve
    start_kill_s=$ready_s
    mapped_after=$(mapped)
    stop_clean

    jq -nc \
        --arg size "$s" --argjson total "$total" --argjson vol "$vol_extents" \
        --argjson ssd_mib "$ssd_mib" --argjson hdd_mib "$hdd_mib" --argjson hz "$hz" \
        --argjson idle "$idle" --argjson busy "$busy" \
        --argjson format_s "$format_s" --argjson start_first_s "$start_first_s" \
        --argjson rss_idle "$rss_idle" --argjson rss_after "$rss_after" \
        --argjson rss_restart "$rss_restart" --argjson hwm "$hwm" \
        --argjson meta_fresh "$meta_fresh" --argjson meta_after "$meta_after" \
        --argjson idle_ticks "$idle_ticks" --argjson idle_rounds "$idle_rounds" \
        --arg idle_mig "$idle_mig" --arg busy_mig "$busy_mig" \
        --argjson busy_ticks "$busy_ticks" --argjson busy_rounds "$busy_rounds" \
        --argjson busy_moves "$busy_moves" --argjson busy_peak "$busy_peak" \
        --argjson busy_precleaned "$busy_precleaned" \
        --argjson writes "$writes" --argjson write_size "$write_size" --argjson write_s "$write_s" \
        --argjson status_s "$status_s" --argjson map_s "$map_s" \
        --argjson stop_s "$stop_s" --argjson start_clean_s "$start_clean_s" \
        --argjson start_kill_s "$start_kill_s" \
        --argjson mapped_before "$mapped_before" --argjson mapped_after "$mapped_after" \
        --argjson run_s "$(elapsed "$size_t0")" '
        def r(x; d): (x * pow(10; d) | round) / pow(10; d);
        def num(s): if s == "" then null else (s | tonumber) end;
        def per_round(t; n): if t == null or n == 0 then null else r(t / $hz / n * 1000; 2) end;
        num($idle_mig) as $im | num($busy_mig) as $bm | {
            size: $size, extents: $total, volume_extents: $vol,
            ssd_bytes: ($ssd_mib * 1048576), hdd_bytes: ($hdd_mib * 1048576),
            format_s: $format_s, start_first_s: $start_first_s,
            memory: {
                rss_idle_bytes: ($rss_idle * 1024), rss_after_writes_bytes: ($rss_after * 1024),
                rss_after_restart_bytes: ($rss_restart * 1024), peak_bytes: ($hwm * 1024),
                idle_bytes_per_extent: r($rss_idle * 1024 / $vol; 1),
                after_writes_bytes_per_extent: r($rss_after * 1024 / $vol; 1)
            },
            idle: {
                window_s: $idle, cpu_s_per_min: r($idle_ticks / $hz * 60 / $idle; 3),
                cpu_percent: r($idle_ticks / $hz / $idle * 100; 2),
                rounds: $idle_rounds, migrator_cpu_ms_per_round: per_round($im; $idle_rounds)
            },
            busy: {
                window_s: $busy, cpu_s_per_min: r($busy_ticks / $hz * 60 / $busy; 3),
                cpu_percent: r($busy_ticks / $hz / $busy * 100; 2),
                rounds: $busy_rounds, rounds_per_s: r($busy_rounds / $busy; 2),
                moves: $busy_moves, precleaned: $busy_precleaned,
                migrator_cpu_ms_per_round: per_round($bm; $busy_rounds),
                migrator_peak_percent: r($busy_peak / $hz * 100; 1)
            },
            writes: {count: $writes, bytes_each: $write_size, seconds: $write_s},
            answer_s: {status: $status_s, placement_map: $map_s},
            restart: {
                stop_s: $stop_s, start_after_clean_stop_s: $start_clean_s,
                start_after_kill9_s: $start_kill_s,
                mapped_extents_before: $mapped_before, mapped_extents_after_kill9: $mapped_after
            },
            meta_bytes: {fresh: $meta_fresh, after_writes: $meta_after},
            run_s: $run_s
        }' >>"$results"
    log "$s: done in $(elapsed "$size_t0") s"
    [ "$keep" = 1 ] || rm -rf "$data"
done

# The table: one column per size.
jq -rs '
    def mib: . / 1048576 | (. * 10 | round) / 10 | tostring + " MiB";
    def ms: . * 1000 | (. * 10 | round) / 10 | tostring + " ms";
    def s: (. * 100 | round) / 100 | tostring + " s";
    def opt(f): if . == null then "-" else f end;
    [
      ["extents (volume)", (.[] | .volume_extents | tostring)],
      ["SSD + HDD", (.[] | "\(.ssd_bytes / 1073741824) + \(.hdd_bytes / 1073741824) GiB")],
      ["RSS idle", (.[] | .memory.rss_idle_bytes | mib)],
      ["  bytes/extent", (.[] | .memory.idle_bytes_per_extent | tostring)],
      ["RSS after 1 % writes", (.[] | .memory.rss_after_writes_bytes | mib)],
      ["  bytes/extent", (.[] | .memory.after_writes_bytes_per_extent | tostring)],
      ["RSS after restart", (.[] | .memory.rss_after_restart_bytes | mib)],
      ["peak RSS", (.[] | .memory.peak_bytes | mib)],
      ["idle CPU s/min", (.[] | .idle.cpu_s_per_min | tostring)],
      ["idle CPU % of a core", (.[] | .idle.cpu_percent | tostring)],
      ["idle migrator CPU/round", (.[] | .idle.migrator_cpu_ms_per_round | opt(tostring + " ms"))],
      ["busy CPU s/min", (.[] | .busy.cpu_s_per_min | tostring)],
      ["busy rounds per second", (.[] | .busy.rounds_per_s | tostring)],
      ["busy migrator CPU/round", (.[] | .busy.migrator_cpu_ms_per_round | opt(tostring + " ms"))],
      ["busy migrator peak second", (.[] | .busy.migrator_peak_percent | tostring + " %")],
      ["moves, pre-cleaned (busy)", (.[] | "\(.busy.moves), \(.busy.precleaned)")],
      ["writes (count, time)", (.[] | "\(.writes.count), \(.writes.seconds | s)")],
      ["format", (.[] | .format_s | s)],
      ["first start", (.[] | .start_first_s | s)],
      ["clean stop", (.[] | .restart.stop_s | s)],
      ["start after clean stop", (.[] | .restart.start_after_clean_stop_s | s)],
      ["start after kill -9", (.[] | .restart.start_after_kill9_s | s)],
      ["mapped before / after -9", (.[] | "\(.restart.mapped_extents_before) / \(.restart.mapped_extents_after_kill9)")],
      ["meta dir fresh", (.[] | .meta_bytes.fresh | mib)],
      ["meta dir after writes", (.[] | .meta_bytes.after_writes | mib)],
      ["tierctl status", (.[] | .answer_s.status | ms)],
      ["tierctl placement --map", (.[] | .answer_s.placement_map | ms)]
    ] as $rows
    | (["size"] + [.[] | .size]) as $head
    | ([$head] + $rows)[] | @tsv' "$results" |
    awk -F'\t' '{ printf "%-27s", $1; for (i = 2; i <= NF; i++) printf " %16s", $i; printf "\n" }'

if [ -n "$json_out" ]; then
    jq -s --arg version "$version" --arg machine "$machine" --arg date "$(date -u +%FT%TZ)" \
        --argjson idle "$idle" --argjson busy "$busy" --argjson write_size "$write_size" \
        '{tierd: $version, machine: $machine, date: $date,
          idle_window_s: $idle, busy_window_s: $busy, write_size: $write_size,
          sizes: .}' "$results" >"$json_out"
    log "wrote $json_out"
fi
