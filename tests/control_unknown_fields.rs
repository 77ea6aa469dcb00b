//! The control protocol refuses unknown fields, as docs/operations.md says,
//! on every request, with an error naming the field: `{"cmd":"status","x":1}`
//! is refused (it was answered as a plain status), and the connection goes
//! on answering the next request.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;

use common::*;
use serde_json::Value;

fn ask(conn: &mut BufReader<UnixStream>, line: &str) -> Value {
    let s = conn.get_mut();
    s.write_all(line.as_bytes()).expect("sending a request");
    s.write_all(b"\n").expect("sending a newline");
    let mut answer = String::new();
    conn.read_line(&mut answer).expect("reading the answer");
    serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{line}: answer {answer:?}: {e}"))
}

#[test]
fn unknown_fields_are_refused_naming_the_field() {
    let d = Daemon::start_with(DaemonOptions::small());
    let sock = d.data_dir().join("control.sock");
    let stream = UnixStream::connect(&sock).expect("connecting to the control socket");
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .expect("read timeout");
    let mut conn = BufReader::new(stream);
    for (line, field) in [
        (r#"{"cmd":"status","x":1}"#, "x"),
        (r#"{"cmd":"reload","force":true}"#, "force"),
        (r#"{"cmd":"explain","offset":0,"verbose":true}"#, "verbose"),
        (r#"{"cmd":"unpin","offset":0,"length":4096}"#, "length"),
    ] {
        let r = ask(&mut conn, line);
        assert_eq!(r["ok"], false, "{line} was accepted: {r}");
        let e = r["error"].as_str().unwrap_or_default();
        assert!(
            e.contains(&format!("\"{field}\"")) || e.contains(&format!("`{field}`")),
            "{line}: the error does not name {field:?}: {e}"
        );
    }
    let r = ask(&mut conn, r#"{"cmd":"status"}"#);
    assert_eq!(r["ok"], true, "{r}");
    assert!(r["result"]["capacity_bytes"].as_u64().is_some(), "{r}");
}
