//! Fuzz the superblock decoder: never panics; a superblock it accepts
//! encodes back to one that decodes equal.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierd::volume::Superblock;

fuzz_target!(|data: &[u8]| {
    if let Ok(sb) = Superblock::decode(data) {
        let again = Superblock::decode(&sb.encode()).expect("re-decode");
        assert_eq!(again, sb);
    }
});
