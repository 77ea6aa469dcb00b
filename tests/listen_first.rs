//! A start that cannot serve leaves nothing behind: the listen addresses
//! are bound before an image is created or a volume formatted, so `tierd
//! serve` on an empty data directory with its NBD port taken creates no
//! image and no metadata store; and a control socket another daemon
//! answers on is refused, not taken over.

mod common;
mod start_support;

use std::net::TcpListener;

use common::tempdir;
use start_support::{fails, tierd_in, Serving};

#[test]
fn a_busy_port_stops_the_start_before_anything_is_formatted() {
    let dir = tempdir();
    let busy = TcpListener::bind("127.0.0.1:0").expect("taking a port");
    let port = busy.local_addr().expect("its address").to_string();
    let err = fails(&mut tierd_in(
        dir.path(),
        &[
            "serve",
            "--data-dir",
            "d1",
            "--ssd-size",
            "16MiB",
            "--hdd-size",
            "64MiB",
            "--listen",
            &port,
            "--metrics-listen",
            "",
        ],
    ));
    assert!(
        err.contains(&port) && err.contains("in use"),
        "the refusal names the address: {err}"
    );
    for left in ["d1/ssd.img", "d1/hdd.img", "d1/meta", "d1/control.sock"] {
        assert!(
            !dir.path().join(left).exists(),
            "{left} was left behind by a start that could not serve: {err}"
        );
    }
}

#[test]
fn a_live_control_socket_is_refused_not_taken_over() {
    let dir = tempdir();
    let first = Serving::start(
        &mut tierd_in(
            dir.path(),
            &[
                "serve",
                "--data-dir",
                "one",
                "--ssd-size",
                "16MiB",
                "--hdd-size",
                "64MiB",
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "",
            ],
        ),
        &dir.path().join("one.log"),
    );
    let sock = dir.path().join("one/control.sock");
    assert!(sock.exists(), "{}", first.log());
    let sock_arg = sock.display().to_string();
    let err = fails(&mut tierd_in(
        dir.path(),
        &[
            "serve",
            "--data-dir",
            "two",
            "--ssd-size",
            "16MiB",
            "--hdd-size",
            "64MiB",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "",
            "--control",
            &sock_arg,
        ],
    ));
    assert!(err.contains("another process serves on"), "{err}");
    assert!(
        !dir.path().join("two/ssd.img").exists(),
        "the second start formatted before it failed"
    );
    assert!(
        std::os::unix::net::UnixStream::connect(&sock).is_ok(),
        "the first daemon's control socket was taken away"
    );
}
