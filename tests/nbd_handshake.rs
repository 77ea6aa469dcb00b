//! NBD handshake tests over real TCP sockets on 127.0.0.1: export names,
//! client flags, option haggling (LIST, INFO, GO, unsupported and invalid
//! options), meta contexts, and the handshake timeout.

mod nbd_support;

use nbd_support::*;

#[tokio::test]
async fn export_name_with_and_without_zeroes() {
    let srv = start().await;
    for (flags, name) in [(FLAG_C_FIXED_NEWSTYLE, "disk"), (3, "")] {
        let mut c = Client::greet(srv.addr, flags).await;
        c.send_opt(OPT_EXPORT_NAME, name.as_bytes()).await;
        let size = c.s.read_u64().await.unwrap();
        let tflags = c.s.read_u16().await.unwrap();
        assert_eq!(size, SIZE);
        assert_ne!(tflags & FLAG_HAS_FLAGS, 0);
        assert_eq!(tflags & FLAG_SEND_DF, 0, "no DF without structured replies");
        if flags & FLAG_C_NO_ZEROES == 0 {
            let mut z = [1u8; 124];
            c.s.read_exact(&mut z).await.unwrap();
            assert_eq!(z, [0u8; 124]);
        }
        // Transmission works right after.
        c.write(0, 1, 0, b"hello").await;
        assert_eq!(c.result(1).await.0, 0);
        assert_eq!(c.read(2, 0, 5).await, b"hello");
    }
    // An unknown export name cannot be refused politely: the server hangs up.
    let mut c = Client::greet(srv.addr, 3).await;
    c.send_opt(OPT_EXPORT_NAME, b"nope").await;
    c.expect_closed().await;
    srv.shutdown().await;
}

#[tokio::test]
async fn unknown_client_flags_close() {
    let srv = start().await;
    let mut c = Client::greet(srv.addr, 1 | (1 << 7)).await;
    c.expect_closed().await;
    srv.shutdown().await;
}

#[tokio::test]
async fn list_info_and_go() {
    let srv = start().await;
    let mut c = Client::greet(srv.addr, 3).await;

    let r = c.opt(OPT_LIST, &[]).await;
    assert_eq!(r.len(), 3);
    let mut names = Vec::new();
    for s in &r[..2] {
        assert_eq!(s.typ, REP_SERVER);
        let n = u32::from_be_bytes(s.data[0..4].try_into().unwrap()) as usize;
        names.push(String::from_utf8(s.data[4..4 + n].to_vec()).unwrap());
    }
    names.sort();
    assert_eq!(names, vec!["", "disk"]);
    assert_eq!(r[2].typ, REP_ACK);
    let r = c.opt(OPT_LIST, b"x").await;
    assert_eq!(r.last().unwrap().typ, REP_ERR_INVALID);

    // INFO with every item requested.
    let r = c
        .opt(
            OPT_INFO,
            &info_payload("disk", &[INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE]),
        )
        .await;
    assert_eq!(r.last().unwrap().typ, REP_ACK);
    let mut seen = HashMap::new();
    for i in &r[..r.len() - 1] {
        assert_eq!(i.typ, REP_INFO);
        seen.insert(
            u16::from_be_bytes([i.data[0], i.data[1]]),
            i.data[2..].to_vec(),
        );
    }
    let export = &seen[&INFO_EXPORT];
    assert_eq!(u64::from_be_bytes(export[0..8].try_into().unwrap()), SIZE);
    let tflags = u16::from_be_bytes([export[8], export[9]]);
    for f in [
        FLAG_HAS_FLAGS,
        FLAG_SEND_FLUSH,
        FLAG_SEND_FUA,
        FLAG_SEND_TRIM,
        FLAG_SEND_WRITE_ZEROES,
        FLAG_SEND_FAST_ZERO,
        FLAG_SEND_CACHE,
        FLAG_CAN_MULTI_CONN,
    ] {
        assert_ne!(tflags & f, 0, "flag {f:#x}");
    }
    assert_eq!(
        tflags & (FLAG_READ_ONLY | FLAG_ROTATIONAL | FLAG_SEND_DF),
        0
    );
    let bs = &seen[&INFO_BLOCK_SIZE];
    assert_eq!(bs.len(), 12);
    assert_eq!(u32::from_be_bytes(bs[0..4].try_into().unwrap()), 1);
    assert_eq!(u32::from_be_bytes(bs[4..8].try_into().unwrap()), 4096);
    assert_eq!(u32::from_be_bytes(bs[8..12].try_into().unwrap()), 32 << 20);
    assert_eq!(seen[&INFO_NAME], b"disk");
    assert_eq!(seen[&INFO_DESCRIPTION], b"test disk");

    // INFO without requests still has EXPORT and BLOCK_SIZE, not NAME.
    let r = c.opt(OPT_INFO, &info_payload("", &[])).await;
    let types: Vec<u16> = r[..r.len() - 1]
        .iter()
        .map(|i| u16::from_be_bytes([i.data[0], i.data[1]]))
        .collect();
    assert!(types.contains(&INFO_EXPORT) && types.contains(&INFO_BLOCK_SIZE));
    assert!(!types.contains(&INFO_NAME));

    // Unknown export and malformed payloads: errors, handshake goes on.
    let mut bad = info_payload("disk", &[]);
    bad[3] = 200; // name length beyond the payload
    expect_single_replies(
        &mut c,
        &[
            (OPT_GO, &info_payload("other", &[]), REP_ERR_UNKNOWN),
            (OPT_GO, &bad, REP_ERR_INVALID),
            (OPT_INFO, &[0, 0], REP_ERR_INVALID),
        ],
    )
    .await;

    // Then GO works and enters transmission.
    let r = c.go("disk", &[INFO_BLOCK_SIZE]).await;
    assert_eq!(r.last().unwrap().typ, REP_ACK);
    assert_eq!(c.size, SIZE);
    assert_eq!(c.read(1, 0, 512).await, vec![0u8; 512]);
    srv.shutdown().await;
}

#[tokio::test]
async fn unsupported_and_invalid_options() {
    let srv = start().await;
    let mut c = Client::greet(srv.addr, 3).await;
    let too_long = vec![0u8; 100 * 1024];
    expect_single_replies(
        &mut c,
        &[
            (OPT_STARTTLS, &[], REP_ERR_UNSUP),
            (OPT_EXTENDED_HEADERS, &[], REP_ERR_UNSUP),
            (OPT_PEEK_EXPORT, &[], REP_ERR_UNSUP),
            (4242, &[], REP_ERR_UNSUP),
            (OPT_STRUCTURED_REPLY, b"junk", REP_ERR_INVALID),
            // An over-long option is consumed and refused.
            (77, &too_long, REP_ERR_TOO_BIG),
        ],
    )
    .await;
    // Still in the handshake.
    let r = c.opt(OPT_LIST, &[]).await;
    assert_eq!(r.last().unwrap().typ, REP_ACK);
    // ABORT: ACK, then close.
    let r = c.opt(OPT_ABORT, &[]).await;
    assert_eq!(r[0].typ, REP_ACK);
    c.expect_closed().await;

    // An absurd option length is a hard disconnect.
    let mut c = Client::greet(srv.addr, 3).await;
    let mut b = Vec::new();
    b.extend_from_slice(&IHAVEOPT.to_be_bytes());
    b.extend_from_slice(&OPT_GO.to_be_bytes());
    b.extend_from_slice(&u32::MAX.to_be_bytes());
    c.s.write_all(&b).await.unwrap();
    c.expect_closed().await;

    // So is a bad option magic.
    let mut c = Client::greet(srv.addr, 3).await;
    c.s.write_all(&[0u8; 16]).await.unwrap();
    c.expect_closed().await;
    srv.shutdown().await;
}

#[tokio::test]
async fn meta_contexts() {
    let srv = start().await;
    let mut c = Client::greet(srv.addr, 3).await;
    // SET before structured replies: invalid.
    let r = c.set_meta(&["base:allocation"]).await;
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].typ, REP_ERR_INVALID);
    c.structured_reply().await;

    let ctx_name = |r: &OptReply| String::from_utf8(r.data[4..].to_vec()).unwrap();
    for queries in [
        &[][..],
        &["base:"][..],
        &["base:allocation", "x-foo:bar"][..],
    ] {
        let r = c
            .opt(OPT_LIST_META_CONTEXT, &meta_payload("disk", queries))
            .await;
        assert_eq!(r.len(), 2, "{queries:?}");
        assert_eq!(r[0].typ, REP_META_CONTEXT);
        assert_eq!(ctx_name(&r[0]), "base:allocation");
        assert_eq!(r[1].typ, REP_ACK);
    }
    let r = c
        .opt(
            OPT_LIST_META_CONTEXT,
            &meta_payload("", &["qemu:dirty-bitmap:x"]),
        )
        .await;
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].typ, REP_ACK);
    let r = c
        .opt(OPT_LIST_META_CONTEXT, &meta_payload("nope", &[]))
        .await;
    assert_eq!(r[0].typ, REP_ERR_UNKNOWN);
    let mut bad = meta_payload("", &["base:"]);
    bad[11] = 99; // query length beyond the payload
    assert_eq!(
        c.opt(OPT_SET_META_CONTEXT, &bad).await[0].typ,
        REP_ERR_INVALID
    );

    // SET: unknown contexts omitted; "base:" selects nothing.
    let r = c.set_meta(&["base:", "x-foo:bar"]).await;
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].typ, REP_ACK);
    let r = c.set_meta(&["x-foo:bar", "base:allocation"]).await;
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].typ, REP_META_CONTEXT);
    assert_eq!(ctx_name(&r[0]), "base:allocation");
    let id = u32::from_be_bytes(r[0].data[0..4].try_into().unwrap());

    let r = c.go("disk", &[]).await;
    assert_eq!(r.last().unwrap().typ, REP_ACK);
    assert_ne!(c.tflags & FLAG_SEND_DF, 0);
    c.request(0, CMD_BLOCK_STATUS, 1, 0, 4096).await;
    let r = c.full_reply(1).await;
    assert_eq!(r.len(), 1);
    let (flags, typ, payload) = only_chunk(&r);
    assert_eq!(flags, REPLY_FLAG_DONE);
    assert_eq!(typ, REPLY_TYPE_BLOCK_STATUS);
    assert_eq!(
        descriptors(payload),
        (id, vec![(4096, STATE_HOLE | STATE_ZERO)])
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn handshake_timeout() {
    let srv = start_with(
        Arc::new(MemExport::new(SIZE)),
        ServerOptions {
            handshake_timeout: Duration::from_millis(200),
            ..opts()
        },
    )
    .await;
    let mut c = Client::greet(srv.addr, 3).await;
    let t0 = std::time::Instant::now();
    c.expect_closed().await;
    assert!(t0.elapsed() >= Duration::from_millis(150));
    srv.shutdown().await;
}
