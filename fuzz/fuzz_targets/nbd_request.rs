//! Fuzz the NBD request header parser: never panics, and a header it
//! accepts re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierd::nbd::proto;

fuzz_target!(|data: &[u8]| {
    let Some(hdr) = data.get(..proto::REQUEST_HEADER_LEN) else {
        return;
    };
    let mut buf = [0u8; proto::REQUEST_HEADER_LEN];
    buf.copy_from_slice(hdr);
    if let Ok(req) = proto::parse_request(&buf) {
        assert_eq!(proto::encode_request(&req), buf);
    }
});
