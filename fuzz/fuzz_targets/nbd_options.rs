//! Fuzz the NBD handshake parsers: option header, strings, INFO/GO and
//! meta-context payloads. None may panic; accepted values must be bounded
//! by the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierd::nbd::proto;

fuzz_target!(|data: &[u8]| {
    if let Some(hdr) = data.get(..proto::OPTION_HEADER_LEN) {
        let mut buf = [0u8; proto::OPTION_HEADER_LEN];
        buf.copy_from_slice(hdr);
        let _ = proto::parse_option_header(&buf);
    }
    if let Ok(s) = proto::parse_string(data) {
        assert!(s.len() <= data.len());
    }
    if let Ok(req) = proto::parse_info_request(data) {
        assert!(req.name.len() <= data.len());
        assert!(req.requests.len() * 2 <= data.len());
    }
    if let Ok(req) = proto::parse_meta_context_request(data) {
        assert!(req.export.len() <= data.len());
        assert!(req.queries.iter().map(String::len).sum::<usize>() <= data.len());
    }
});
