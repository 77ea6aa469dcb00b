//! Prometheus endpoint of the real daemon: after known I/O over NBD
//! (nbdcopy writing and reading back 8 MiB), a scrape of `/metrics` shows
//! request counts, payload bytes, latency histograms, device bytes per tier,
//! capacity, the data only on the SSD and an open connection consistent
//! with what was done.

mod common;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;

/// The metrics address the daemon logged (`--metrics-listen 127.0.0.1:0`).
fn metrics_addr(d: &Daemon) -> String {
    let mut addr = None;
    wait_until(Duration::from_secs(10), || {
        let log = d.log();
        addr = log.find("serving metrics on http://").and_then(|i| {
            let rest = &log[i + "serving metrics on http://".len()..];
            rest.find("/metrics").map(|j| rest[..j].to_string())
        });
        addr.is_some()
    });
    addr.unwrap_or_else(|| panic!("no metrics address in the log:\n{}", d.log()))
}

/// GET `path`; returns (status line, headers+body text).
fn http_get(addr: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connecting {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("setting a timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").expect("sending the request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("reading the response");
    let status = text.lines().next().unwrap_or("").to_string();
    (status, text)
}

/// Samples of a scrape: `name{labels}` -> value.
fn scrape(addr: &str) -> HashMap<String, f64> {
    let (status, text) = http_get(addr, "/metrics");
    assert!(status.contains("200"), "scrape failed: {text}");
    assert!(
        text.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{text}"
    );
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

fn get(m: &HashMap<String, f64>, key: &str) -> f64 {
    *m.get(key).unwrap_or_else(|| {
        let mut keys: Vec<_> = m.keys().collect();
        keys.sort();
        panic!("metric {key} missing; have: {keys:#?}")
    })
}

#[test]
fn counters_follow_real_io() {
    let d = Daemon::start_with(DaemonOptions {
        extra_args: vec!["--metrics-listen".into(), "127.0.0.1:0".into()],
        ..DaemonOptions::small()
    });
    let addr = metrics_addr(&d);

    let before = scrape(&addr);
    let size: f64 = run_ok(tool("nbdinfo").args(["--size", &d.uri()]))
        .trim()
        .parse()
        .expect("nbdinfo prints the size");
    assert_eq!(get(&before, "tierd_volume_capacity_bytes"), size);
    assert_eq!(
        get(
            &before,
            &format!(
                "tierd_build_info{{version=\"{}\"}}",
                env!("CARGO_PKG_VERSION")
            )
        ),
        1.0
    );
    assert_eq!(get(&before, "tierd_degraded"), 0.0);
    assert_eq!(get(&before, "tierd_health_problems"), 0.0);
    assert!(get(&before, "tierd_metadata_flush_age_seconds") >= 0.0);
    // The standard process metrics.
    // Whole clock ticks: a daemon that has done nothing yet may show 0
    // (the I/O below must move it, checked after).
    assert!(get(&before, "process_cpu_seconds_total") >= 0.0);
    assert!(get(&before, "process_open_fds") >= 3.0);
    assert!(get(&before, "process_resident_memory_bytes") > 0.0);
    assert!(get(&before, "process_start_time_seconds") > 1.6e9);
    let ssd_cap = get(&before, "tierd_tier_capacity_bytes{tier=\"ssd\"}");
    let hdd_cap = get(&before, "tierd_tier_capacity_bytes{tier=\"hdd\"}");
    assert!(ssd_cap > 0.0 && hdd_cap > ssd_cap, "{ssd_cap} {hdd_cap}");
    assert_eq!(get(&before, "tierd_extents{tier=\"ssd\"}"), 0.0);
    // Nothing written yet: nothing only on the SSD, and no age.
    assert_eq!(get(&before, "tierd_only_copy_bytes{tier=\"ssd\"}"), 0.0);
    assert_eq!(
        get(&before, "tierd_only_copy_oldest_seconds{tier=\"ssd\"}"),
        0.0
    );

    // 8 MiB of known data in at offset 0, then read back.
    let len = 8 * MIB as usize;
    let data = random_bytes(len, 42);
    let src = d.dir().join("in.bin");
    let back = d.dir().join("out.bin");
    write(&src, &data);
    run_ok(tool("nbdcopy").arg(&src).arg(d.uri()));
    // Read the whole (small) volume back and compare the first 8 MiB.
    run_ok(tool("nbdcopy").arg(d.uri()).arg(&back));
    let got = read(&back);
    assert_same_bytes("read back", &got[..len], &data);

    // Hold one connection open while scraping.
    let held = TcpStream::connect(d.addr()).expect("connecting to NBD");
    let mut m = HashMap::new();
    let counted = wait_until(Duration::from_secs(10), || {
        m = scrape(&addr);
        get(&m, "tierd_nbd_connections") >= 1.0
    });
    assert!(counted, "an open connection is not counted: {m:?}");
    // 8 MiB written and read over NBD took the daemon some CPU.
    assert!(
        get(&m, "process_cpu_seconds_total") > get(&before, "process_cpu_seconds_total"),
        "CPU time did not grow with the I/O"
    );

    let writes = get(
        &m,
        "tierd_nbd_requests_total{command=\"write\",result=\"ok\"}",
    );
    assert!(writes >= 1.0, "write requests {writes}");
    let wbytes = get(&m, "tierd_nbd_request_bytes_total{command=\"write\"}");
    assert!(wbytes >= len as f64, "write payload {wbytes} < {len}");
    let rbytes = get(&m, "tierd_nbd_request_bytes_total{command=\"read\"}");
    // nbdcopy asks for block status and reads only the allocated 8 MiB.
    assert!(rbytes >= len as f64, "read payload {rbytes} < {len}");
    assert!(
        get(
            &m,
            "tierd_nbd_requests_total{command=\"block_status\",result=\"ok\"}"
        ) >= 1.0
    );
    // Histogram count equals the request count per command.
    let wcount = get(
        &m,
        "tierd_nbd_request_duration_seconds_count{command=\"write\"}",
    );
    assert_eq!(wcount, writes, "histogram count vs requests");
    let inf = get(
        &m,
        "tierd_nbd_request_duration_seconds_bucket{command=\"write\",le=\"+Inf\"}",
    );
    assert_eq!(inf, writes);
    assert!(
        get(
            &m,
            "tierd_nbd_request_duration_seconds_sum{command=\"write\"}"
        ) > 0.0
    );

    // Device bytes: every written byte went to some tier.
    let dev_w = get(&m, "tierd_device_io_bytes_total{tier=\"ssd\",op=\"write\"}")
        + get(&m, "tierd_device_io_bytes_total{tier=\"hdd\",op=\"write\"}");
    assert!(dev_w >= len as f64, "device write bytes {dev_w} < {len}");
    let dev_ops = get(&m, "tierd_device_io_total{tier=\"ssd\",op=\"write\"}")
        + get(&m, "tierd_device_io_total{tier=\"hdd\",op=\"write\"}");
    assert!(dev_ops >= 1.0);
    let dev_r = get(&m, "tierd_device_io_bytes_total{tier=\"ssd\",op=\"read\"}")
        + get(&m, "tierd_device_io_bytes_total{tier=\"hdd\",op=\"read\"}");
    assert!(dev_r >= len as f64, "device read bytes {dev_r} < {len}");

    // The 8 written extents are mapped and counted as used.
    let extents = get(&m, "tierd_extents{tier=\"ssd\"}") + get(&m, "tierd_extents{tier=\"hdd\"}");
    assert!(extents >= 8.0, "mapped extents {extents}");
    let used = get(&m, "tierd_tier_used_bytes{tier=\"ssd\"}")
        + get(&m, "tierd_tier_used_bytes{tier=\"hdd\"}");
    assert_eq!(used, extents * MIB as f64);
    let free_ssd = get(&m, "tierd_tier_free_bytes{tier=\"ssd\"}");
    assert!(free_ssd <= ssd_cap - get(&m, "tierd_tier_used_bytes{tier=\"ssd\"}"));
    // The data only on the SSD (the migrator may have given some of it an
    // HDD copy already): at most what was written, and aged while any is.
    let exposed = get(&m, "tierd_only_copy_bytes{tier=\"ssd\"}");
    assert!(
        exposed >= 0.0 && exposed <= dev_w,
        "SSD-only bytes {exposed}"
    );
    let oldest = get(&m, "tierd_only_copy_oldest_seconds{tier=\"ssd\"}");
    assert!(oldest >= 0.0, "oldest SSD-only age {oldest}");
    if exposed == 0.0 {
        assert_eq!(oldest, 0.0, "an age with nothing exposed");
    }
    // Reads of mapped data were hits somewhere; the ratio is a ratio.
    let hits = get(&m, "tierd_read_hits_total{tier=\"ssd\"}")
        + get(&m, "tierd_read_hits_total{tier=\"hdd\"}");
    assert!(hits >= 1.0);
    // The hit ratio by bytes comes from the byte counters: every byte read
    // back from the written 8 MiB was mapped.
    let hit = |t: &str| get(&m, &format!("tierd_read_hit_bytes_total{{tier=\"{t}\"}}"));
    assert!(hit("ssd") + hit("hdd") >= len as f64, "hit bytes");
    // Every byte the client wrote landed on one tier or the other, and
    // migration's copies are not among them.
    let landed = |t: &str| {
        get(
            &m,
            &format!("tierd_write_landed_bytes_total{{tier=\"{t}\"}}"),
        )
    };
    assert!(
        landed("ssd") + landed("hdd") >= len as f64,
        "landed bytes {} + {} < {len}",
        landed("ssd"),
        landed("hdd")
    );
    assert!(
        landed("ssd") + landed("hdd") <= dev_w,
        "landed bytes past the device's writes"
    );
    assert!(!m.keys().any(|k| k.starts_with("tierd_ssd_hit_ratio")));
    assert!(!m.keys().any(|k| k.starts_with("tierd_up")));

    // Device latency histograms per tier, op and class: the foreground
    // writes are all counted (at least one device write per NBD write
    // that reached a device), nothing was background, buckets rise to
    // the count and the busy time is positive.
    let lat = |t: &str, op: &str, class: &str, part: &str| {
        get(
            &m,
            &format!(
                "tierd_device_io_duration_seconds_{part}{{tier=\"{t}\",op=\"{op}\",class=\"{class}\"}}"
            ),
        )
    };
    let writes_of =
        |class: &str| lat("ssd", "write", class, "count") + lat("hdd", "write", class, "count");
    // Every device write is timed, in one class or the other (migration and
    // pre-cleaning may have run: they are background).
    let metered = writes_of("foreground") + writes_of("background");
    assert!(
        metered >= dev_ops,
        "metered writes {metered} < device writes {dev_ops}"
    );
    assert!(
        writes_of("foreground") >= 1.0,
        "the NBD writes are foreground"
    );
    assert!(
        lat("ssd", "write", "foreground", "sum") + lat("hdd", "write", "foreground", "sum") > 0.0
    );
    for t in ["ssd", "hdd"] {
        for op in ["read", "write", "sync"] {
            for class in ["foreground", "background"] {
                let key = |le: &str| {
                    format!("tierd_device_io_duration_seconds_bucket{{tier=\"{t}\",op=\"{op}\",class=\"{class}\",le=\"{le}\"}}")
                };
                let (first, inf) = (get(&m, &key("0.00001")), get(&m, &key("+Inf")));
                assert!(first <= inf);
                assert_eq!(inf, lat(t, op, class, "count"), "{t} {op} {class}");
            }
        }
    }
    let busy = get(&m, "tierd_device_io_time_seconds_total{tier=\"ssd\"}")
        + get(&m, "tierd_device_io_time_seconds_total{tier=\"hdd\"}");
    assert!(busy > 0.0, "busy time {busy}");
    // The configured bandwidth is what the daemon runs with (default 128 MiB/s).
    assert_eq!(
        get(&m, "tierd_migration_bandwidth_bytes_per_second"),
        (128 << 20) as f64
    );
    // Working set, backlog and throttle series exist.
    let hot = get(&m, "tierd_hot_bytes{tier=\"ssd\"}") + get(&m, "tierd_hot_bytes{tier=\"hdd\"}");
    assert!(hot <= used, "hot {hot} > used {used}");
    assert!(get(&m, "tierd_tier_usable_bytes{tier=\"ssd\"}") <= ssd_cap);
    for k in [
        "tierd_migration_planned_total",
        "tierd_migration_queued_moves",
        "tierd_migration_backoff_seconds_total",
        "tierd_migration_throttle_seconds_total",
        "tierd_migration_bandwidth_bytes_per_second",
        "tierd_migration_more_waiting",
        "tierd_migration_backing_off",
        "tierd_active_bytes",
        "tierd_heat_tracked_extents",
        "tierd_heat_dropped_total",
        "tierd_read_unmapped_bytes_total",
        "tierd_zero_copy_reads_total",
        "tierd_zero_copy_read_bytes_total",
        "process_threads",
        "process_virtual_memory_bytes",
        "process_max_fds",
    ] {
        assert!(get(&m, k) >= 0.0, "{k}");
    }
    // No tier's name inside a metric name: tiers are labels.
    for k in m.keys() {
        let name = k.split('{').next().unwrap_or(k);
        assert!(
            !name.split('_').any(|w| w == "ssd" || w == "hdd"),
            "{name} carries a label value in its name"
        );
    }
    assert_eq!(
        get(&m, "tierd_reserve_target_bytes"),
        get(&m, "tierd_reserve_format_bytes")
    );
    // Counters are present even when zero.
    for outcome in ["admitted", "remembered", "dropped", "no_room", "paced"] {
        let k = format!("tierd_admissions_total{{outcome=\"{outcome}\"}}");
        assert!(get(&m, &k) >= 0.0, "{k}");
    }
    // The promotions' budget is off by default: nothing is paced.
    assert_eq!(get(&m, "tierd_promotions_paced_total"), 0.0);
    assert_eq!(
        get(
            &m,
            "tierd_migrations_total{direction=\"promote\",reason=\"pin\"}"
        ),
        0.0
    );
    drop(held);

    // Other paths.
    let (st, _) = http_get(&addr, "/nope");
    assert!(st.contains("404"), "{st}");
    let mut s = TcpStream::connect(&addr).expect("connecting");
    s.write_all(b"POST /metrics HTTP/1.1\r\n\r\n")
        .expect("sending");
    let mut t = String::new();
    s.read_to_string(&mut t).expect("reading");
    assert!(t.starts_with("HTTP/1.1 405"), "{t}");
}

#[test]
fn busy_metrics_port_does_not_stop_serving() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("binding");
    let port = busy.local_addr().expect("address").port();
    let d = Daemon::start_with(DaemonOptions {
        extra_args: vec!["--metrics-listen".into(), format!("127.0.0.1:{port}")],
        ..DaemonOptions::small()
    });
    // The daemon serves NBD anyway and says why metrics are off.
    run_ok(tool("nbdinfo").args(["--size", &d.uri()]));
    assert!(
        wait_until(Duration::from_secs(5), || d
            .log()
            .contains("metrics are off")),
        "{}",
        d.log()
    );
}
