#!/usr/bin/env bash
# A volume filled to the brim (`benchmarks/scale.sh --full` runs this): for
# each size (in 1 MiB extents; the SSD is 1/16 of it, the HDD the rest,
# sparse image files), format, serve, and write one 4 KiB block into every
# extent of the volume in address order (fio's nbd engine, QD 16), then
#
#   - the fill's rate per tenth of the volume (writes per second between
#     the moments the writes crossed each tenth of the extents; fio's
#     log of every write) and the last tenth over the first;
#   - bytes written to the SSD and the HDD per host byte (tierctl status:
#     every device write, copies and the write log included);
#   - the daemon's resident memory: peak during the fill, right after it,
#     after --settle seconds idle (heat keeps an extent touched within its
#     horizon, about ten half-lives: ten minutes by default; then drops it),
#     and just after each restart; bytes per extent (RSS / extents);
#   - restart times: a clean stop (SIGTERM) and start, then kill -9 and
#     start, each until the NBD port serves and tierctl status answers, and
#     the mapped extents before and after each (they must match).
#   - with --seq-pass: then a sequential 1 MiB pass over the whole volume
#     (it writes the volume's full size: only where the disk holds that),
#     with its rate and the memory after it.
#
# Where the images live matters: on this machine's ext4 root a plain fio
# writing the same pattern into one sparse 960 GiB file (no tierd) falls
# from about 18,000 to 2,000–7,000 writes a second after about 550,000
# of them (ext4's block allocator scanning its groups, `perf`:
# ext4_mb_scan_groups_linear under fdatasync), and on XFS stays at about
# 19,000. Put --workdir on XFS (a loop-mounted image will do) to measure
# tierd rather than the host's allocator; the table says which filesystem
# held the images.
#
# A human table goes to stdout, progress to stderr, every number to
# --json FILE.
#
# Usage: benchmarks/scale-full.sh [--sizes 1M,4M] [--bin DIR] [--workdir DIR]
#          [--settle S] [--seq-pass] [--port N] [--keep] [--json FILE]
#   --sizes LIST  volume sizes in extents: N, NK (x1024) or NM (x1048576)
#                 (default 1M,4M)
#   --bin DIR     where tierd and tierctl are (default ./target/release)
#   --workdir DIR where the images go (default: a new dir under /var/tmp,
#                 removed at the end unless --keep)
#   --settle S    idle seconds after the fill before measuring memory again
#                 (default 30)
#   --seq-pass    also write the whole volume sequentially after the fill
#   --port N      NBD port on 127.0.0.1 (default 12819)
# Needs fio (nbd engine), nbdinfo, jq, awk, stat.
set -euo pipefail

sizes="1M,4M"
bindir="./target/release"
workdir=""
settle=30
seq_pass=0
port=12819
keep=0
json_out=""

die() { echo "scale-full: $*" >&2; exit 1; }
log() { echo "scale-full: $*" >&2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --sizes) sizes=${2:?--sizes needs a list}; shift ;;
        --bin) bindir=${2:?--bin needs a directory}; shift ;;
        --workdir) workdir=${2:?--workdir needs a directory}; shift ;;
        --settle) settle=${2:?--settle needs seconds}; shift ;;
        --seq-pass) seq_pass=1 ;;
        --port) port=${2:?--port needs a number}; shift ;;
        --keep) keep=1 ;;
        --json) json_out=${2:?--json needs a file}; shift ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done
for n in "$settle" "$port"; do
    [[ "$n" =~ ^[0-9]+$ ]] || die "not a whole number: $n"
done
for t in fio nbdinfo jq awk stat; do
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
IFS=, read -r -a size_list <<<"$sizes"
for s in "${size_list[@]}"; do
    e=$(extents_of "$s") || die "not a size in extents: $s (e.g. 1M, 256K, 65536)"
    [ "$e" -ge 1024 ] || die "$s: at least 1K extents (the SSD is 1/16 of the volume)"
done
if [ -z "$workdir" ]; then
    workdir=$(mktemp -d /var/tmp/tierd-scale-full.XXXXXX)
else
    mkdir -p "$workdir"
fi
fs=$(stat -f -c %T "$workdir")
pid=""
sampler=""
cleanup() {
    [ -z "$sampler" ] || kill "$sampler" 2>/dev/null || true
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

rss_kib() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

version=$("$tierd" --version 2>/dev/null || echo unknown)
rows=()
for s in "${size_list[@]}"; do
    n=$(extents_of "$s")
    ssd_mib=$((n / 16))
    hdd_mib=$((n - ssd_mib))
    data="$workdir/$s"
    rm -rf "$data" "$data".*
    log "$s: formatting ${ssd_mib} MiB SSD + ${hdd_mib} MiB HDD (sparse) on $fs in $data"
    "$tierd" format --data-dir "$data" --ssd-size "${ssd_mib}MiB" --hdd-size "${hdd_mib}MiB" \
        --json >"$data.format.json" 2>"$data.format.log" ||
        die "format failed for $s: $(tail -3 "$data.format.log")"
    start serve
    size=$(nbdinfo --size "nbd://127.0.0.1:$port")
    extents=$((size / 1048576))
    rss_fresh=$(rss_kib "$pid")
    # RSS each second, for the peak.
    (while kill -0 "$pid" 2>/dev/null; do rss_kib "$pid"; sleep 1; done) >"$data.rss" &
    sampler=$!
    log "$s: writing 4 KiB into each of $extents extents"
    t0=$(now)
    fio --name=fill --ioengine=nbd --uri="nbd://127.0.0.1:$port" --rw=write:1020k --bs=4k \
        --iodepth=16 --size="$size" --io_size=$((extents * 4))k --output-format=json \
        --write_lat_log="$data.fill" --log_avg_msec=0 >"$data.fill.json" 2>"$data.fill.err" ||
        die "fio failed for $s: $(tail -3 "$data.fill.err")"
    fill_s=$(elapsed "$t0")
    rss_after=$(rss_kib "$pid")
    st=$(status_json)
    ssd_w=$(jq '.tiers[0].write_bytes' <<<"$st")
    hdd_w=$(jq '.tiers[1].write_bytes' <<<"$st")
    full=$(jq '.write_log.full' <<<"$st")
    mapped_fill=$(jq '[.tiers[].extents] | add' <<<"$st")
    [ "$mapped_fill" = "$extents" ] || log "$s: $mapped_fill of $extents extents mapped after the fill"
    # Per tenth: the moment the fill's writes crossed each tenth of the
    # extents (fio's log of every write's completion, in ms since the job
    # began), and the rate between crossings. Per-second logs made a fill
    # of seconds one window per tenth or less, its tenths meaningless.
    # Only the ten crossings are kept (the log has a line per write: 4 M
    # at 4M extents); writes missing from the log end at its last line.
    tenths=$(awk -F, -v total="$extents" '
        BEGIN { k = 1; next_i = int(total / 10); if (next_i < 1) next_i = 1 }
        {
            n++; last = $1
            while (k <= 10 && n >= next_i) {
                t[k++] = $1; next_i = int(total * k / 10); if (next_i < 1) next_i = 1
            }
        }
        END {
            for (; k <= 10; k++) t[k] = last
            prev = 0
            for (k = 1; k <= 10; k++) {
                at = t[k] / 1000; if (at <= prev) at = prev + 0.001
                printf "%s%.0f", (k > 1 ? "," : ""), (total / 10) / (at - prev)
                prev = at
            }
        }' "$data.fill_lat.1.log")
    log "$s: filled in ${fill_s}s; writes/s per tenth: $tenths"
    if [ "$seq_pass" = 1 ]; then
        log "$s: sequential pass over $size bytes"
        t0=$(now)
        fio --name=seq --ioengine=nbd --uri="nbd://127.0.0.1:$port" --rw=write --bs=1m \
            --iodepth=4 --size="$size" --output-format=json >"$data.seq.json" 2>"$data.seq.err" ||
            die "sequential pass failed for $s: $(tail -3 "$data.seq.err")"
        seq_s=$(elapsed "$t0")
        rss_seq=$(rss_kib "$pid")
        st=$(status_json)
        # Device bytes the pass wrote, per byte it sent (the fill's before).
        seq_ssd=$(jq --argjson b "$ssd_w" --argjson n "$size" '(.tiers[0].write_bytes - $b) / $n' <<<"$st")
        seq_hdd=$(jq --argjson b "$hdd_w" --argjson n "$size" '(.tiers[1].write_bytes - $b) / $n' <<<"$st")
        seq_mibs=$(awk -v n="$size" -v t="$seq_s" 'BEGIN { printf "%.1f", n / 1048576 / t }')
        log "$s: sequential pass in ${seq_s}s ($seq_mibs MiB/s); SSD $seq_ssd, HDD $seq_hdd bytes written per byte sent"
    else
        seq_s=null
        rss_seq=null
        seq_ssd=null
        seq_hdd=null
        seq_mibs=null
    fi
    log "$s: idle ${settle}s"
    sleep "$settle"
    rss_settled=$(rss_kib "$pid")
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    sampler=""
    rss_peak=$(sort -n "$data.rss" | tail -1)
    mapped_before=$(mapped)
    stop_clean
    clean_stop_s=$stop_s
    start restart
    clean_start_s=$ready_s
    sleep 2
    rss_restart=$(rss_kib "$pid")
    mapped_restart=$(mapped)
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null || true
    pid=""
    start kill9
    kill_start_s=$ready_s
    mapped_kill=$(mapped)
    stop_clean
    [ "$mapped_restart" = "$mapped_before" ] && [ "$mapped_kill" = "$mapped_before" ] ||
        die "$s: mapped extents changed across restarts: $mapped_before / $mapped_restart / $mapped_kill"
    host=$((extents * 4096))
    row=$(jq -n --arg size "$s" --arg fs "$fs" --argjson extents "$extents" \
        --argjson fill_s "$fill_s" --arg tenths "$tenths" \
        --argjson ssd_w "$ssd_w" --argjson hdd_w "$hdd_w" --argjson host "$host" \
        --argjson full "$full" --argjson fresh "$rss_fresh" --argjson peak "$rss_peak" \
        --argjson after "$rss_after" --argjson settled "$rss_settled" --argjson settle "$settle" \
        --argjson restart "$rss_restart" --argjson seq_s "$seq_s" --argjson rss_seq "$rss_seq" \
        --argjson seq_ssd "$seq_ssd" --argjson seq_hdd "$seq_hdd" --argjson seq_mibs "$seq_mibs" \
        --argjson clean_stop "$clean_stop_s" --argjson clean_start "$clean_start_s" \
        --argjson kill_start "$kill_start_s" --argjson mapped "$mapped_before" '
        ($tenths | split(",") | map(tonumber)) as $t |
        {size: $size, fs: $fs, extents: $extents, fill_s: $fill_s,
         writes_per_s_by_tenth: $t, last_over_first: ($t[-1] / $t[0]),
         ssd_written_per_host_byte: ($ssd_w / $host), hdd_written_per_host_byte: ($hdd_w / $host),
         log_found_full: $full,
         rss_kib: {fresh: $fresh, peak: $peak, after_fill: $after, settled: $settled,
                   after_seq_pass: $rss_seq, after_restart: $restart},
         settle_s: $settle, seq_pass_s: $seq_s, seq_pass_mib_per_s: $seq_mibs,
         seq_pass_ssd_written_per_byte: $seq_ssd, seq_pass_hdd_written_per_byte: $seq_hdd,
         bytes_per_extent: {after_fill: ($after * 1024 / $extents),
                            settled: ($settled * 1024 / $extents),
                            after_restart: ($restart * 1024 / $extents)},
         clean_stop_s: $clean_stop, clean_start_s: $clean_start, kill9_start_s: $kill_start,
         mapped: $mapped}')
    rows+=("$row")
    log "$s: done"
done

all=$(printf '%s\n' "${rows[@]}" | jq -s --arg v "$version" --arg date "$(date -u +%FT%TZ)" \
    '{tierd: $v, date: $date, sizes: .}')
[ -z "$json_out" ] || echo "$all" >"$json_out"
jq -r '
  def r(x): (x * 100 | round) / 100;
  .sizes as $s |
  (["", ($s[] | .size)] | join(" | ")),
  (["---", ($s[] | "---:")] | join("|")),
  (["images on", ($s[] | .fs)] | join(" | ")),
  (["extents (all written)", ($s[] | "\(.extents) (\(.mapped))")] | join(" | ")),
  (["fill time, s", ($s[] | "\(.fill_s)")] | join(" | ")),
  (["writes/s per tenth", ($s[] | .writes_per_s_by_tenth | map(tostring) | join(" "))] | join(" | ")),
  (["last tenth / first", ($s[] | "\(r(.last_over_first))")] | join(" | ")),
  (["SSD / HDD bytes per host byte", ($s[] | "\(r(.ssd_written_per_host_byte)) / \(r(.hdd_written_per_host_byte))")] | join(" | ")),
  (["RSS peak / after fill, MiB", ($s[] | "\(r(.rss_kib.peak / 1024)) / \(r(.rss_kib.after_fill / 1024))")] | join(" | ")),
  (["RSS after settle / restart, MiB", ($s[] | "\(r(.rss_kib.settled / 1024)) (\(.settle_s) s) / \(r(.rss_kib.after_restart / 1024))")] | join(" | ")),
  (["bytes per extent: fill / settled / restart", ($s[] | "\(r(.bytes_per_extent.after_fill)) / \(r(.bytes_per_extent.settled)) / \(r(.bytes_per_extent.after_restart))")] | join(" | ")),
  (["clean stop / start, s", ($s[] | "\(.clean_stop_s) / \(.clean_start_s)")] | join(" | ")),
  (["start after kill -9, s", ($s[] | "\(.kill9_start_s)")] | join(" | ")),
  (if any($s[]; .seq_pass_s != null) then
     (["sequential pass: s, MiB/s", ($s[] | "\(.seq_pass_s) s, \(.seq_pass_mib_per_s)")] | join(" | ")),
     (["sequential pass: SSD / HDD bytes per byte", ($s[] | "\(r(.seq_pass_ssd_written_per_byte // 0)) / \(r(.seq_pass_hdd_written_per_byte // 0))")] | join(" | ")),
     (["RSS after the pass, MiB", ($s[] | "\(r((.rss_kib.after_seq_pass // 0) / 1024))")] | join(" | "))
   else empty end)
' <<<"$all"
