//! Every message shape of the codec, parsed and encoded.

use super::*;

fn be32(v: u32) -> [u8; 4] {
    v.to_be_bytes()
}

#[test]
fn magics_and_values() {
    assert_eq!(&NBDMAGIC.to_be_bytes(), b"NBDMAGIC");
    assert_eq!(&IHAVEOPT.to_be_bytes(), b"IHAVEOPT");
    assert_eq!(REP_ERR_UNSUP, 0x8000_0001);
    assert_eq!(REP_ERR_TOO_BIG, 0x8000_0009);
    assert_eq!(REPLY_TYPE_ERROR, 32769);
    assert_eq!(FLAG_SEND_FAST_ZERO, 2048);
}

#[test]
fn greeting() {
    let g = encode_server_greeting(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
    assert_eq!(&g[0..8], b"NBDMAGIC");
    assert_eq!(&g[8..16], b"IHAVEOPT");
    assert_eq!(&g[16..18], &[0, 3]);
}

#[test]
fn option_header() {
    let mut b = [0u8; 16];
    b[0..8].copy_from_slice(&IHAVEOPT.to_be_bytes());
    b[8..12].copy_from_slice(&be32(OPT_GO));
    b[12..16].copy_from_slice(&be32(77));
    assert_eq!(
        parse_option_header(&b),
        Ok(OptionHeader {
            option: OPT_GO,
            len: 77
        })
    );
    b[0] = 0;
    assert!(matches!(
        parse_option_header(&b),
        Err(ProtoError::BadMagic(_))
    ));
}

fn info_payload(name: &[u8], reqs: &[u16]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&(name.len() as u32).to_be_bytes());
    p.extend_from_slice(name);
    p.extend_from_slice(&(reqs.len() as u16).to_be_bytes());
    for r in reqs {
        p.extend_from_slice(&r.to_be_bytes());
    }
    p
}

#[test]
fn info_request_ok() {
    let p = info_payload(b"disk", &[INFO_NAME, INFO_BLOCK_SIZE]);
    let r = parse_info_request(&p).unwrap();
    assert_eq!(r.name, "disk");
    assert_eq!(r.requests, vec![INFO_NAME, INFO_BLOCK_SIZE]);
    let r = parse_info_request(&info_payload(b"", &[])).unwrap();
    assert_eq!(r.name, "");
    assert!(r.requests.is_empty());
}

#[test]
fn info_request_malformed() {
    // Name length larger than the payload.
    let mut p = info_payload(b"disk", &[]);
    p[0..4].copy_from_slice(&be32(1000));
    assert!(matches!(
        parse_info_request(&p),
        Err(ProtoError::Truncated { .. })
    ));
    // Huge name length: refused without allocation.
    p[0..4].copy_from_slice(&be32(u32::MAX));
    assert!(matches!(
        parse_info_request(&p),
        Err(ProtoError::StringTooLong(_))
    ));
    // Count of requests larger than what follows.
    let mut p = info_payload(b"d", &[1]);
    let at = 4 + 1;
    p[at..at + 2].copy_from_slice(&500u16.to_be_bytes());
    assert!(matches!(
        parse_info_request(&p),
        Err(ProtoError::Truncated { .. })
    ));
    // Trailing bytes.
    let mut p = info_payload(b"d", &[1]);
    p.push(0);
    assert_eq!(parse_info_request(&p), Err(ProtoError::TrailingBytes(1)));
    // Too short for the name length.
    assert!(parse_info_request(&[0, 0]).is_err());
    // Missing the request count.
    assert!(parse_info_request(&[0, 0, 0, 0]).is_err());
    // Bad strings.
    assert_eq!(
        parse_info_request(&info_payload(b"a\0b", &[])),
        Err(ProtoError::BadString)
    );
    assert_eq!(
        parse_info_request(&info_payload(&[0xff, 0xfe], &[])),
        Err(ProtoError::BadString)
    );
}

fn meta_payload(name: &str, queries: &[&str]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&(name.len() as u32).to_be_bytes());
    p.extend_from_slice(name.as_bytes());
    p.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        p.extend_from_slice(&(q.len() as u32).to_be_bytes());
        p.extend_from_slice(q.as_bytes());
    }
    p
}

#[test]
fn meta_context_ok() {
    let r = parse_meta_context_request(&meta_payload("", &["base:allocation", "base:"])).unwrap();
    assert_eq!(r.export, "");
    assert_eq!(r.queries, vec!["base:allocation", "base:"]);
    let r = parse_meta_context_request(&meta_payload("x", &[])).unwrap();
    assert!(r.queries.is_empty());
}

#[test]
fn meta_context_malformed() {
    // Query count far beyond what the payload could hold.
    let mut p = meta_payload("", &[]);
    p[4..8].copy_from_slice(&be32(u32::MAX));
    assert!(matches!(
        parse_meta_context_request(&p),
        Err(ProtoError::Truncated { .. })
    ));
    // Query length beyond the payload.
    let mut p = meta_payload("", &["base:"]);
    p[8..12].copy_from_slice(&be32(100));
    assert!(matches!(
        parse_meta_context_request(&p),
        Err(ProtoError::Truncated { .. })
    ));
    // Query length beyond the string limit.
    p[8..12].copy_from_slice(&be32(5000));
    assert_eq!(
        parse_meta_context_request(&p),
        Err(ProtoError::StringTooLong(5000))
    );
    // Trailing bytes.
    let mut p = meta_payload("", &["base:"]);
    p.extend_from_slice(&[1, 2]);
    assert_eq!(
        parse_meta_context_request(&p),
        Err(ProtoError::TrailingBytes(2))
    );
    assert!(parse_meta_context_request(&[]).is_err());
}

#[test]
fn client_side_codec_reads_what_the_server_side_writes() {
    let opt = encode_option(OPT_GO, b"abc");
    let mut h = [0u8; OPTION_HEADER_LEN];
    h.copy_from_slice(&opt[..OPTION_HEADER_LEN]);
    assert_eq!(
        parse_option_header(&h),
        Ok(OptionHeader {
            option: OPT_GO,
            len: 3
        })
    );
    assert_eq!(&opt[OPTION_HEADER_LEN..], b"abc");
    let mut out = Vec::new();
    encode_option_reply(&mut out, OPT_GO, REP_ERR_UNKNOWN, b"xy");
    let mut r = [0u8; OPTION_REPLY_HEADER_LEN];
    r.copy_from_slice(&out[..OPTION_REPLY_HEADER_LEN]);
    assert_eq!(
        parse_option_reply(&r),
        Ok(OptionReply {
            option: OPT_GO,
            reply_type: REP_ERR_UNKNOWN,
            len: 2
        })
    );
    r[0] ^= 1;
    assert!(matches!(
        parse_option_reply(&r),
        Err(ProtoError::BadMagic(_))
    ));
    let s = encode_simple_reply(EIO, 77);
    assert_eq!(parse_simple_reply(&s), Ok((EIO, 77)));
    let st = encode_structured_header(0, REPLY_TYPE_NONE, 77, 0);
    let mut st16 = [0u8; SIMPLE_REPLY_LEN];
    st16.copy_from_slice(&st[..SIMPLE_REPLY_LEN]);
    assert!(matches!(
        parse_simple_reply(&st16),
        Err(ProtoError::BadMagic(_))
    ));
}

#[test]
fn request_roundtrip() {
    let req = Request {
        flags: CMD_FLAG_FUA,
        typ: CMD_WRITE,
        cookie: 0x0102_0304_0506_0708,
        offset: 4096,
        length: 512,
    };
    let b = encode_request(&req);
    assert_eq!(&b[0..4], &[0x25, 0x60, 0x95, 0x13]);
    assert_eq!(parse_request(&b), Ok(req));
    let mut bad = b;
    bad[3] ^= 1;
    assert!(matches!(parse_request(&bad), Err(ProtoError::BadMagic(_))));
}

#[test]
fn option_replies() {
    let mut out = Vec::new();
    encode_option_reply(&mut out, OPT_LIST, REP_SERVER, &encode_rep_server("ab", ""));
    assert_eq!(&out[0..8], &OPTION_REPLY_MAGIC.to_be_bytes());
    assert_eq!(&out[8..12], &be32(OPT_LIST));
    assert_eq!(&out[12..16], &be32(REP_SERVER));
    assert_eq!(&out[16..20], &be32(6));
    assert_eq!(&out[20..], &[0, 0, 0, 2, b'a', b'b']);

    let e = encode_info_export(1 << 30, FLAG_HAS_FLAGS);
    assert_eq!(e.len(), 12);
    assert_eq!(&e[0..2], &[0, 0]);
    assert_eq!(&e[2..10], &(1u64 << 30).to_be_bytes());
    assert_eq!(&e[10..12], &[0, 1]);
    let b = encode_info_block_size(1, 4096, 1 << 25);
    assert_eq!(b.len(), 14);
    assert_eq!(&b[0..2], &[0, 3]);
    assert_eq!(&b[10..14], &be32(1 << 25));
    assert_eq!(encode_info_string(INFO_NAME, "n"), vec![0, 1, b'n']);
    assert_eq!(encode_meta_context(7, "base:allocation")[..4], be32(7));
    assert_eq!(encode_export_name_reply(5, 1, false).len(), 134);
    assert_eq!(encode_export_name_reply(5, 1, true).len(), 10);
}

#[test]
fn simple_and_structured_replies() {
    let s = encode_simple_reply(EINVAL, 9);
    assert_eq!(&s[0..4], &be32(SIMPLE_REPLY_MAGIC));
    assert_eq!(&s[4..8], &be32(22));
    assert_eq!(&s[8..16], &9u64.to_be_bytes());

    let mut out = Vec::new();
    encode_none_chunk(&mut out, 3);
    assert_eq!(out.len(), 20);
    assert_eq!(&out[0..4], &be32(STRUCTURED_REPLY_MAGIC));
    assert_eq!(&out[4..6], &REPLY_FLAG_DONE.to_be_bytes());
    assert_eq!(&out[6..8], &REPLY_TYPE_NONE.to_be_bytes());
    assert_eq!(&out[16..20], &be32(0));

    let mut out = Vec::new();
    encode_offset_data_header(&mut out, 3, 4096, 512, true).unwrap();
    assert_eq!(out.len(), 28);
    assert_eq!(&out[6..8], &REPLY_TYPE_OFFSET_DATA.to_be_bytes());
    assert_eq!(&out[16..20], &be32(520));
    assert_eq!(&out[20..28], &4096u64.to_be_bytes());
    let mut none = Vec::new();
    assert!(encode_offset_data_header(&mut none, 3, 0, usize::MAX, true).is_none());

    let mut out = Vec::new();
    encode_error_chunk(&mut out, 4, EIO, "boom");
    assert_eq!(&out[6..8], &REPLY_TYPE_ERROR.to_be_bytes());
    assert_eq!(&out[16..20], &be32(10));
    assert_eq!(&out[20..24], &be32(EIO));
    assert_eq!(&out[24..26], &[0, 4]);
    assert_eq!(&out[26..], b"boom");

    let mut out = Vec::new();
    let long = "é".repeat(3000); // 6000 bytes; truncated on a char boundary
    encode_error_chunk(&mut out, 4, EIO, &long);
    let mlen = u16::from_be_bytes([out[24], out[25]]) as usize;
    assert!(mlen <= MAX_STRING_LEN);
    assert!(std::str::from_utf8(&out[26..]).is_ok());
    assert_eq!(out.len(), 26 + mlen);

    let mut out = Vec::new();
    let d = [
        Descriptor {
            len: 65536,
            flags: STATE_HOLE | STATE_ZERO,
        },
        Descriptor { len: 512, flags: 0 },
    ];
    encode_block_status_chunk(&mut out, 5, 1, &d, true).unwrap();
    assert_eq!(&out[6..8], &REPLY_TYPE_BLOCK_STATUS.to_be_bytes());
    assert_eq!(&out[16..20], &be32(20));
    assert_eq!(&out[20..24], &be32(1));
    assert_eq!(&out[24..28], &be32(65536));
    assert_eq!(&out[28..32], &be32(3));
    assert_eq!(&out[32..36], &be32(512));
    assert_eq!(&out[36..40], &be32(0));
    assert!(encode_block_status_chunk(&mut Vec::new(), 5, 1, &[], true).is_none());
}
