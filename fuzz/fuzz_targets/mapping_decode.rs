//! Fuzz the extent-record decoder: never panics; a record it accepts
//! encodes back to a record that decodes to the same mapping.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tierd::volume::Mapping;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rec)) = data.split_first() else {
        return;
    };
    // Blocks per extent as real volumes have them: 16 (64 KiB) to 16384 (64 MiB).
    let blocks = 16u32 << (sel % 11);
    if let Ok(m) = Mapping::decode(rec, blocks) {
        let again = Mapping::decode(&m.encode(), blocks).expect("re-decode");
        assert_eq!(again, m);
    }
});
