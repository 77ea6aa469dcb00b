//! NBD over TLS (`NBD_OPT_STARTTLS`) against the real daemon.
//!
//! A CA, a server certificate for 127.0.0.1/localhost and a client
//! certificate are made at test time with `openssl`. libnbd clients
//! (`nbdinfo`, `nbdcopy`) connect with `nbds://` URIs and a GnuTLS X.509
//! directory (qemu-io uses the same directory through `tls-creds-x509`) (`ca-cert.pem`, and `client-cert.pem`/`client-key.pem` for
//! client authentication); a raw client checks the option-haggling rules
//! (TLS required before anything else, STARTTLS only once, EXPORT_NAME
//! before TLS closes) with a rustls client for the upgrade.

mod common;
mod raw_client;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::{
    assert_same_bytes, random_bytes, read, run, run_ok, show, tool, write, Daemon, DaemonOptions,
    MIB,
};
use raw_client::{
    go_payload, read_greeting, read_option_reply, send_option, OPT_ABORT, OPT_EXPORT_NAME, OPT_GO,
    OPT_INFO, OPT_LIST, OPT_STARTTLS, OPT_STRUCTURED_REPLY, REP_ACK, REP_ERR_INVALID,
    REP_ERR_TLS_REQD, REP_INFO,
};
use tokio_rustls::rustls;

/// Certificates made by `openssl` in one directory.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A GnuTLS X.509 directory for libnbd holding the CA and, if
    /// `client_cert`, the client certificate and key.
    fn client_dir(&self, name: &str, client_cert: bool) -> PathBuf {
        let d = self.dir.join(name);
        std::fs::create_dir_all(&d).expect("client dir");
        std::fs::copy(self.path("ca-cert.pem"), d.join("ca-cert.pem")).expect("copy CA");
        if client_cert {
            std::fs::copy(self.path("client-cert.pem"), d.join("client-cert.pem"))
                .expect("copy client cert");
            std::fs::copy(self.path("client-key.pem"), d.join("client-key.pem"))
                .expect("copy client key");
        }
        d
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    run_ok(tool("openssl").current_dir(dir).args(args));
}

/// A CA, a server certificate (SAN 127.0.0.1 and localhost) and a client
/// certificate, all EC P-256 and signed by the CA.
fn make_pki(dir: &Path) -> Pki {
    let dir = dir.join("pki");
    std::fs::create_dir_all(&dir).expect("pki dir");
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    let mut ca = vec!["req", "-x509", "-nodes", "-days", "2"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca-key.pem",
        "-out",
        "ca-cert.pem",
        "-subj",
        "/CN=tierd test CA",
    ]);
    openssl(&dir, &ca);
    for (name, cn, ext) in [
        (
            "server",
            "/CN=localhost",
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
        ),
        (
            "client",
            "/CN=tierd test client",
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n",
        ),
    ] {
        let (key, csr, cert, extf) = (
            format!("{name}-key.pem"),
            format!("{name}.csr"),
            format!("{name}-cert.pem"),
            format!("{name}.ext"),
        );
        write(&dir.join(&extf), ext.as_bytes());
        let mut req = vec!["req", "-new", "-nodes"];
        req.extend(ec);
        req.extend(["-keyout", &key, "-out", &csr, "-subj", cn]);
        openssl(&dir, &req);
        openssl(
            &dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca-cert.pem",
                "-CAkey",
                "ca-key.pem",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &extf,
                "-out",
                &cert,
            ],
        );
    }
    Pki { dir }
}

fn tls_daemon(pki: &Pki, client_ca: bool) -> Daemon {
    let mut args = vec![
        "--tls-cert".to_string(),
        pki.path("server-cert.pem").display().to_string(),
        "--tls-key".to_string(),
        pki.path("server-key.pem").display().to_string(),
    ];
    if client_ca {
        args.push("--tls-ca".into());
        args.push(pki.path("ca-cert.pem").display().to_string());
    }
    Daemon::start_with(DaemonOptions {
        extra_args: args,
        ..DaemonOptions::small()
    })
}

fn nbds_uri(d: &Daemon, certs: &Path) -> String {
    format!(
        "nbds://127.0.0.1:{}/?tls-certificates={}",
        d.port(),
        certs.display()
    )
}

fn nbdinfo_size(uri: &str) -> std::process::Output {
    run(tool("nbdinfo").arg("--size").arg(uri))
}

#[test]
fn libnbd_clients_over_tls_and_plain_clients_refused() {
    let tmp = common::tempdir();
    let pki = make_pki(tmp.path());
    let d = tls_daemon(&pki, false);
    let certs = pki.client_dir("certs", false);
    let uri = nbds_uri(&d, &certs);

    let out = nbdinfo_size(&uri);
    assert!(out.status.success(), "{}", show("nbdinfo over TLS", &out));
    let size: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("nbdinfo --size");
    assert!(size > 64 * MIB, "export size {size}");

    // Data written through TLS reads back identical through TLS.
    let data = random_bytes(8 * MIB as usize, 7);
    let input = tmp.path().join("in.raw");
    write(&input, &data);
    run_ok(tool("nbdcopy").arg("--flush").arg(&input).arg(&uri));
    let output = tmp.path().join("out.raw");
    run_ok(tool("nbdcopy").arg(&uri).arg(&output));
    let back = read(&output);
    assert_eq!(back.len() as u64, size);
    assert_same_bytes("read back over TLS", &back[..data.len()], &data);

    // qemu's own TLS client (tls-creds-x509, same directory layout) writes
    // a pattern and reads it back.
    let qemu = run_ok(
        tool("qemu-io")
            .arg("--object")
            .arg(format!(
                "tls-creds-x509,id=tls0,dir={},endpoint=client",
                certs.display()
            ))
            .arg("--image-opts")
            .arg(format!(
                "driver=nbd,host=127.0.0.1,port={},tls-creds=tls0",
                d.port()
            ))
            .args(["-c", "write -P 0xa5 16M 64k"])
            .args(["-c", "read -P 0xa5 16M 64k"]),
    );
    assert!(
        qemu.contains("read 65536/65536") && !qemu.contains("verification failed"),
        "qemu-io over TLS:\n{qemu}"
    );

    // A plain client is refused (TLS required) and the daemon keeps serving.
    let out = nbdinfo_size(&d.uri());
    assert!(
        !out.status.success(),
        "{}",
        show("plain nbdinfo against a TLS-only server", &out)
    );
    // A client that does not trust our CA is refused too.
    let other = tmp.path().join("untrusted");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::copy(pki.path("client-cert.pem"), other.join("ca-cert.pem")).unwrap();
    let out = nbdinfo_size(&nbds_uri(&d, &other));
    assert!(
        !out.status.success(),
        "{}",
        show("nbdinfo with the wrong CA", &out)
    );
    let out = nbdinfo_size(&uri);
    assert!(
        out.status.success(),
        "{}",
        show("nbdinfo after refusals", &out)
    );
    assert!(
        d.log().contains("NBD clients must use TLS"),
        "startup log does not say TLS is required:\n{}",
        d.log()
    );
}

#[test]
fn client_certificates_required_with_tls_ca() {
    let tmp = common::tempdir();
    let pki = make_pki(tmp.path());
    let d = tls_daemon(&pki, true);
    let with = pki.client_dir("with-client-cert", true);
    let without = pki.client_dir("without-client-cert", false);

    let out = nbdinfo_size(&nbds_uri(&d, &without));
    assert!(
        !out.status.success(),
        "{}",
        show("nbdinfo without a client certificate", &out)
    );
    let out = nbdinfo_size(&nbds_uri(&d, &with));
    assert!(
        out.status.success(),
        "{}",
        show("nbdinfo with a client certificate", &out)
    );
    // A certificate signed by another CA is refused.
    let other = make_pki(&tmp.path().join("other"));
    let foreign = tmp.path().join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::copy(pki.path("ca-cert.pem"), foreign.join("ca-cert.pem")).unwrap();
    std::fs::copy(
        other.path("client-cert.pem"),
        foreign.join("client-cert.pem"),
    )
    .unwrap();
    std::fs::copy(other.path("client-key.pem"), foreign.join("client-key.pem")).unwrap();
    let out = nbdinfo_size(&nbds_uri(&d, &foreign));
    assert!(
        !out.status.success(),
        "{}",
        show("nbdinfo with a foreign client certificate", &out)
    );
    let out = nbdinfo_size(&nbds_uri(&d, &with));
    assert!(out.status.success(), "{}", show("nbdinfo at the end", &out));
    assert!(d.log().contains("TLS handshake failed"), "{}", d.log());
}

fn connect(d: &Daemon) -> TcpStream {
    let s = TcpStream::connect(d.addr()).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    read_greeting(&mut &s).expect("greeting");
    // Client flags: FIXED_NEWSTYLE | NO_ZEROES.
    (&s).write_all(&3u32.to_be_bytes()).unwrap();
    s
}

fn rustls_client(pki: &Pki) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(pki.path("ca-cert.pem")).unwrap();
    use rustls::pki_types::pem::PemObject;
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        roots.add(c.expect("CA PEM")).expect("CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

#[test]
fn option_haggling_rules() {
    let tmp = common::tempdir();
    let pki = make_pki(tmp.path());
    let d = tls_daemon(&pki, false);

    // Before TLS: every option but STARTTLS and ABORT gets ERR_TLS_REQD.
    let mut s = connect(&d);
    for (opt, data) in [
        (OPT_LIST, Vec::new()),
        (OPT_INFO, go_payload("")),
        (OPT_STRUCTURED_REPLY, Vec::new()),
        (OPT_GO, go_payload("")),
    ] {
        send_option(&mut s, opt, &data).unwrap();
        let (o, typ, _) = read_option_reply(&mut s).expect("reply");
        assert_eq!((o, typ), (opt, REP_ERR_TLS_REQD), "option {opt}");
    }
    // STARTTLS with data is invalid.
    send_option(&mut s, OPT_STARTTLS, b"x").unwrap();
    let (_, typ, _) = read_option_reply(&mut s).expect("reply");
    assert_eq!(typ, REP_ERR_INVALID);
    // ABORT is answered.
    send_option(&mut s, OPT_ABORT, &[]).unwrap();
    let (o, typ, _) = read_option_reply(&mut s).expect("abort reply");
    assert_eq!((o, typ), (OPT_ABORT, REP_ACK));

    // EXPORT_NAME before TLS: the server closes the connection.
    let mut s = connect(&d);
    send_option(&mut s, OPT_EXPORT_NAME, b"").unwrap();
    let mut buf = [0u8; 1];
    assert!(
        matches!(s.read(&mut buf), Ok(0) | Err(_)),
        "EXPORT_NAME before STARTTLS was answered"
    );

    // STARTTLS, then haggling over TLS: INFO works, a second STARTTLS is
    // invalid, GO enters transmission and a READ is answered.
    let mut s = connect(&d);
    send_option(&mut s, OPT_STARTTLS, &[]).unwrap();
    let (o, typ, _) = read_option_reply(&mut s).expect("STARTTLS reply");
    assert_eq!((o, typ), (OPT_STARTTLS, REP_ACK));
    let conn = rustls::ClientConnection::new(
        rustls_client(&pki),
        rustls::pki_types::ServerName::try_from("localhost").unwrap(),
    )
    .unwrap();
    let mut t = rustls::StreamOwned::new(conn, s);
    send_option(&mut t, OPT_INFO, &go_payload("")).unwrap();
    let mut infos = 0;
    loop {
        let (o, typ, _) = read_option_reply(&mut t).expect("INFO reply over TLS");
        assert_eq!(o, OPT_INFO);
        if typ == REP_ACK {
            break;
        }
        assert_eq!(typ, REP_INFO);
        infos += 1;
    }
    assert!(infos >= 1);
    send_option(&mut t, OPT_STARTTLS, &[]).unwrap();
    let (_, typ, _) = read_option_reply(&mut t).expect("second STARTTLS");
    assert_eq!(typ, REP_ERR_INVALID);
    send_option(&mut t, OPT_GO, &go_payload("")).unwrap();
    loop {
        let (_, typ, _) = read_option_reply(&mut t).expect("GO reply");
        if typ == REP_ACK {
            break;
        }
        assert_eq!(typ, REP_INFO);
    }
    // READ 4096 at 0 (simple reply: structured replies were not asked for).
    let mut req = Vec::new();
    req.extend_from_slice(&0x2560_9513u32.to_be_bytes());
    req.extend_from_slice(&0u16.to_be_bytes());
    req.extend_from_slice(&0u16.to_be_bytes());
    req.extend_from_slice(&42u64.to_be_bytes());
    req.extend_from_slice(&0u64.to_be_bytes());
    req.extend_from_slice(&4096u32.to_be_bytes());
    t.write_all(&req).unwrap();
    t.flush().unwrap();
    let mut head = [0u8; 16];
    t.read_exact(&mut head).expect("READ reply over TLS");
    assert_eq!(raw_client::be32(&head[0..4]), 0x6744_6698, "simple reply");
    assert_eq!(raw_client::be32(&head[4..8]), 0, "no error");
    assert_eq!(raw_client::be64(&head[8..16]), 42, "cookie");
    let mut data = vec![0u8; 4096];
    t.read_exact(&mut data).expect("READ data over TLS");
}

/// The HDD tier of one tierd on another tierd over TLS (`hdd = nbds://…`):
/// the remote requires a client certificate; the front daemon presents
/// one, verifies the remote's certificate, and its data lands on the
/// remote. Without the client certificate, or trusting the wrong CA, the
/// front daemon refuses to start with a message that says why.
#[test]
fn the_hdd_tier_on_another_tierd_over_tls() {
    let tmp = common::tempdir();
    let pki = make_pki(tmp.path());
    let remote = tls_daemon(&pki, true);
    let uri = format!("nbds://127.0.0.1:{}/", remote.port());
    let ssd = tmp.path().join("ssd.img");
    common::sparse_file(&ssd, 64 * MIB);
    let meta = tmp.path().join("meta");
    let p = |name: &str| pki.path(name).display().to_string();
    let devices = vec![
        "--ssd".to_string(),
        ssd.display().to_string(),
        "--hdd".into(),
        uri.clone(),
        "--meta-dir".into(),
        meta.display().to_string(),
    ];
    let tls = vec![
        "--remote-tls-ca".to_string(),
        p("ca-cert.pem"),
        "--remote-tls-cert".into(),
        p("client-cert.pem"),
        "--remote-tls-key".into(),
        p("client-key.pem"),
    ];
    // No client certificate: the remote refuses the handshake.
    let out = run(std::process::Command::new(common::tierd_bin())
        .arg("format")
        .args(&devices)
        .args(&tls[..2])
        .env_remove("RUST_LOG"));
    let text = show("format without a client certificate", &out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("remote capacity tier") && text.contains("TLS"),
        "{text}"
    );
    // Trusting the wrong CA: the remote's certificate is not accepted.
    let out = run(std::process::Command::new(common::tierd_bin())
        .arg("format")
        .args(&devices)
        .args(["--remote-tls-ca".to_string(), p("client-cert.pem")])
        .args(&tls[2..])
        .env_remove("RUST_LOG"));
    let text = show("format trusting the wrong CA", &out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("TLS handshake failed"), "{text}");
    // No CA at all: a configuration error before any connection.
    let out = run(std::process::Command::new(common::tierd_bin())
        .arg("format")
        .args(&devices)
        .env_remove("RUST_LOG"));
    let text = show("format without remote-tls-ca", &out);
    assert!(
        !out.status.success() && text.contains("remote-tls-ca"),
        "{text}"
    );

    run_ok(
        std::process::Command::new(common::tierd_bin())
            .arg("format")
            .args(["--reserve", "16MiB"])
            .args(&devices)
            .args(&tls)
            .env_remove("RUST_LOG"),
    );
    let mut args = devices.clone();
    args.extend(tls);
    let front = Daemon::start_with(DaemonOptions {
        extra_args: args,
        ..DaemonOptions::small()
    });
    assert!(
        front
            .log()
            .contains("connected to the remote capacity tier"),
        "{}",
        front.log()
    );
    // Fill more than the SSD holds, so data lands on the remote.
    let data = random_bytes(96 * MIB as usize, 11);
    let input = tmp.path().join("in.raw");
    write(&input, &data);
    run_ok(tool("nbdcopy").arg("--flush").arg(&input).arg(front.uri()));
    let output = tmp.path().join("out.raw");
    run_ok(tool("nbdcopy").arg(front.uri()).arg(&output));
    assert_same_bytes(
        "read back through the front",
        &read(&output)[..data.len()],
        &data,
    );
    let placement = run_ok(
        std::process::Command::new(common::tierctl_bin())
            .arg("--control")
            .arg(front.control_socket())
            .args(["placement", "0+96MiB"]),
    );
    assert!(
        placement.contains("hdd"),
        "some data is on the remote:\n{placement}"
    );
    // The remote tierd served the front's HDD tier: it wrote data.
    let status = run_ok(
        std::process::Command::new(common::tierctl_bin())
            .arg("--control")
            .arg(remote.control_socket())
            .args(["--json", "status"]),
    );
    let v: serde_json::Value = serde_json::from_str(&status).expect("status JSON");
    let written: u64 = v["tiers"]
        .as_array()
        .expect("tiers")
        .iter()
        .map(|t| t["write_bytes"].as_u64().unwrap_or(0))
        .sum();
    assert!(
        written >= 16 * MIB,
        "the remote tierd wrote {written} bytes:\n{status}"
    );
}
