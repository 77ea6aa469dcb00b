//! `tierd serve --ssd-model/--hdd-model`: the devices take a modelled
//! drive's time on the real clock (reads of data that spilled to the modelled
//! HDD cost milliseconds), and bad model names are refused with the key.

mod common;

#[test]
fn modelled_hdd_reads_take_milliseconds() {
    let mut opts = common::DaemonOptions::small();
    opts.extra_args = ["--ssd-model", "ssd-sata", "--hdd-model", "hdd-7200"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let d = common::Daemon::start_with(opts);
    assert!(d.log().contains("modelled drive"), "{}", d.log());
    // 64 MiB SSD with a 16 MiB reserve: 100 MiB of new data spills to the HDD.
    let dir = common::tempdir();
    let src = dir.path().join("data.bin");
    common::write(&src, &common::random_bytes(100 << 20, 3));
    common::run_ok(common::tool("nbdcopy").arg(&src).arg(d.uri()));
    // 24 scattered 4 KiB reads in the last 20 MiB (HDD extents).
    let mut cmd = common::tool("qemu-io");
    cmd.args(["-f", "raw"]);
    for i in 0..24u64 {
        let off = (80 << 20) + (i * 7919 % 5000) * 4096;
        cmd.args(["-c", &format!("read {off} 4k")]);
    }
    cmd.arg(d.uri());
    let out = common::run_ok(&mut cmd);
    // qemu-io reports each read's rate: "... and N ops/sec".
    let mut rates: Vec<f64> = out
        .lines()
        .filter_map(|l| l.split(" and ").nth(1))
        .filter_map(|r| r.split_whitespace().next())
        .filter_map(|n| n.parse().ok())
        .collect();
    assert_eq!(rates.len(), 24, "{out}");
    rates.sort_by(f64::total_cmp);
    let median = rates[12];
    // A 7200 rpm disk needs milliseconds per random read (rotation alone
    // averages 4 ms): well under 500 reads/s. The page cache does >10k/s.
    assert!(
        median < 500.0,
        "median modelled HDD read rate {median} ops/s:\n{out}"
    );
}

#[test]
fn unknown_models_are_refused_naming_the_key() {
    let dir = common::tempdir();
    for (flag, bad) in [("--ssd-model", "hdd-7200"), ("--hdd-model", "floppy")] {
        let out = common::run(
            std::process::Command::new(common::tierd_bin())
                .arg("serve")
                .arg("--data-dir")
                .arg(dir.path().join("d"))
                .args([flag, bad]),
        );
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&flag[2..]), "{flag} {bad}: {err}");
    }
}
