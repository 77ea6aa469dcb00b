# Shell functions benchmarks/scale.sh and benchmarks/scale-full.sh share
# (sourced, not run): sizes in extents, timing, and a daemon's start, stop
# and status. They use the caller's $tierd, $tierctl, $data, $port and
# $pid, and its die().

# extents_of SIZE: the extent count of 1M, 256K, 65536.
extents_of() {
    case "$1" in
        *[0-9]M) echo $((${1%M} * 1048576)) ;;
        *[0-9]K) echo $((${1%K} * 1024)) ;;
        *) [[ "$1" =~ ^[0-9]+$ ]] && echo "$1" || return 1 ;;
    esac
}

now() { echo "$EPOCHREALTIME"; }
# elapsed T0 [T1]: seconds from T0 to T1 (default now), 3 decimals.
elapsed() { awk -v a="$1" -v b="${2:-$EPOCHREALTIME}" 'BEGIN { printf "%.3f", b - a }'; }

ctl() { "$tierctl" --control "$data/control.sock" "$@"; }
status_json() { ctl --json status; }
mapped() { status_json | jq '[.tiers[].extents] | add'; }

# start LABEL: serve $data in the background; sets $pid and $ready_s, the
# seconds until the NBD port serves and tierctl status answers.
start() {
    local label=$1 t0 nbd_ok=0 ctl_ok=0
    t0=$(now)
    "$tierd" serve --data-dir "$data" --listen "127.0.0.1:$port" --metrics-listen "" \
        --log-level info >>"$data.$label.log" 2>&1 &
    pid=$!
    while :; do
        kill -0 "$pid" 2>/dev/null || {
            pid=""
            die "tierd exited at start ($label): $(tail -3 "$data.$label.log")"
        }
        [ "$nbd_ok" = 1 ] || ! nbdinfo --size "nbd://127.0.0.1:$port" >/dev/null 2>&1 || nbd_ok=1
        [ "$ctl_ok" = 1 ] || ! ctl status >/dev/null 2>&1 || ctl_ok=1
        if [ "$nbd_ok" = 1 ] && [ "$ctl_ok" = 1 ]; then
            break
        fi
        if [ "$(elapsed "$t0" | cut -d. -f1)" -ge 600 ]; then
            die "tierd did not serve within 600 s ($label)"
        fi
        sleep 0.02
    done
    ready_s=$(elapsed "$t0")
}
# stop_clean: SIGTERM and wait; sets $stop_s.
stop_clean() {
    local t0 rc=0
    t0=$(now)
    kill -TERM "$pid"
    wait "$pid" || rc=$?
    stop_s=$(elapsed "$t0")
    pid=""
    [ "$rc" = 0 ] || die "tierd exited with status $rc on SIGTERM (log: $(tail -3 "$data.serve.log"))"
}
