//! Randomized parser testing on stable Rust: the same properties as the
//! cargo-fuzz targets in `fuzz/` (no panic; accepted input round-trips or
//! stays bounded by its size), fed with seeded random bytes and with
//! mutations of valid encodings (bit flips, byte overwrites with extreme
//! values, truncation, extension, splices). `TIERD_FUZZ_ITERS` sets the
//! iterations per parser (default 200 000; scripts/soak-style runs use
//! millions).

use rand::{Rng, SeedableRng};
use tierd::nbd::proto;
use tierd::volume::{
    Loc, LogPos, Logged, Mapping, Shadow, Superblock, Tier, Written, FORMAT_VERSION,
};

fn iters() -> u64 {
    std::env::var("TIERD_FUZZ_ITERS")
        .ok()
        .map(|v| v.parse().expect("TIERD_FUZZ_ITERS is a number"))
        .unwrap_or(200_000)
}

/// Mutate `seed` into a new input.
fn mutate(rng: &mut impl Rng, seed: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..rng.gen_range(1..=4) {
        match rng.gen_range(0..7) {
            0 if !v.is_empty() => {
                let i = rng.gen_range(0..v.len());
                v[i] ^= 1 << rng.gen_range(0..8);
            }
            1 if !v.is_empty() => {
                let i = rng.gen_range(0..v.len());
                v[i] = [0, 1, 0x7f, 0x80, 0xff][rng.gen_range(0..5)];
            }
            2 if v.len() >= 4 => {
                // An extreme 32-bit big-endian length somewhere.
                let i = rng.gen_range(0..=v.len() - 4);
                let x: u32 = [0, 1, 0xffff, 0x1_0000, u32::MAX, u32::MAX / 2][rng.gen_range(0..6)];
                v[i..i + 4].copy_from_slice(&x.to_be_bytes());
            }
            3 => {
                let n = rng.gen_range(0..=v.len());
                v.truncate(n);
            }
            4 => {
                let n = rng.gen_range(1..64);
                v.extend((0..n).map(|_| rng.gen::<u8>()));
            }
            5 if v.len() > 2 => {
                let a = rng.gen_range(0..v.len());
                let b = rng.gen_range(a..v.len());
                let chunk = v[a..b].to_vec();
                let at = rng.gen_range(0..=v.len());
                v.splice(at..at, chunk);
            }
            _ => {
                let n = rng.gen_range(0..48);
                v = (0..n).map(|_| rng.gen()).collect();
            }
        }
    }
    v
}

fn name_payload(name: &str, tail: &[u8]) -> Vec<u8> {
    let mut p = (name.len() as u32).to_be_bytes().to_vec();
    p.extend_from_slice(name.as_bytes());
    p.extend_from_slice(tail);
    p
}

#[test]
fn option_parsers_never_panic_and_stay_bounded() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let seeds: Vec<Vec<u8>> = vec![
        name_payload("", &[0, 0]),
        name_payload("export", &[0, 2, 0, 1, 0, 3]),
        {
            let mut p = name_payload("", &[0, 0, 0, 2]);
            p.extend_from_slice(&name_payload("base:allocation", &[]));
            p.extend_from_slice(&name_payload("qemu:dirty-bitmap:x", &[]));
            p
        },
        b"IHAVEOPT\0\0\0\x07\0\0\0\x06".to_vec(),
    ];
    let n = iters();
    let mut accepted = 0u64;
    for i in 0..n {
        let data = if i % 4 == 0 {
            (0..rng.gen_range(0..40)).map(|_| rng.gen()).collect()
        } else {
            let k = rng.gen_range(0..seeds.len());
            mutate(&mut rng, &seeds[k])
        };
        if let Some(h) = data.get(..proto::OPTION_HEADER_LEN) {
            let mut buf = [0u8; proto::OPTION_HEADER_LEN];
            buf.copy_from_slice(h);
            let _ = proto::parse_option_header(&buf);
        }
        if let Ok(s) = proto::parse_string(&data) {
            assert!(s.len() <= data.len());
        }
        if let Ok(r) = proto::parse_info_request(&data) {
            accepted += 1;
            assert!(r.name.len() + 2 * r.requests.len() <= data.len());
        }
        if let Ok(r) = proto::parse_meta_context_request(&data) {
            accepted += 1;
            let total: usize = r.queries.iter().map(String::len).sum();
            assert!(r.export.len() + total <= data.len(), "{data:?}");
        }
    }
    eprintln!("option parsers: {n} inputs, {accepted} accepted");
    assert!(
        accepted > n / 100,
        "mutations never produced a valid payload"
    );
}

#[test]
fn request_header_parser_never_panics_and_round_trips() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    let valid = proto::encode_request(&proto::Request {
        flags: 1,
        typ: proto::CMD_WRITE,
        cookie: 7,
        offset: 4096,
        length: 512,
    });
    let n = iters();
    let mut accepted = 0u64;
    for _ in 0..n {
        let data = mutate(&mut rng, &valid);
        let Some(h) = data.get(..proto::REQUEST_HEADER_LEN) else {
            continue;
        };
        let mut buf = [0u8; proto::REQUEST_HEADER_LEN];
        buf.copy_from_slice(h);
        if let Ok(req) = proto::parse_request(&buf) {
            accepted += 1;
            assert_eq!(proto::encode_request(&req), buf);
        }
    }
    eprintln!("request headers: {n} inputs, {accepted} accepted");
    assert!(accepted > 0);
}

#[test]
fn metadata_decoders_never_panic_and_round_trip() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let mut partial = Written::empty(256);
    partial.set_range(3, 77, true, 256);
    let maps = [
        Mapping::plain(
            Loc {
                tier: Tier::Hdd,
                slot: 12345,
            },
            partial.clone(),
        ),
        Mapping::plain(
            Loc {
                tier: Tier::Ssd,
                slot: 0,
            },
            Written::Full,
        ),
        Mapping {
            logged: vec![
                Logged::whole(3, LogPos { slot: 9, index: 0 }),
                Logged {
                    block: 70,
                    at: LogPos { slot: 9, index: 1 },
                    // Logged in part (a version-3 record), when block 70
                    // was written before.
                    sectors: if partial.get(70) { 0b0001_1000 } else { 0xff },
                },
            ],
            ..Mapping::plain(
                Loc {
                    tier: Tier::Hdd,
                    slot: 7,
                },
                partial.clone(),
            )
        },
        Mapping {
            shadow: Some(Shadow {
                slot: 44,
                stale: partial,
            }),
            ..Mapping::plain(
                Loc {
                    tier: Tier::Ssd,
                    slot: 2,
                },
                Written::Full,
            )
        },
    ];
    let sb = Superblock {
        version: FORMAT_VERSION,
        role: Tier::Ssd,
        volume_id: uuid_like(),
        extent_size: 1 << 20,
        device_size: 64 << 20,
        data_offset: 1 << 20,
        slots: 63,
        created: 1_700_000_000,
    };
    let seeds: Vec<Vec<u8>> = maps.iter().map(Mapping::encode).collect();
    let sb_seed = sb.encode();
    let n = iters();
    let (mut maps_ok, mut sbs_ok) = (0u64, 0u64);
    for i in 0..n {
        let blocks = 16u32 << rng.gen_range(0..11);
        let rec = mutate(&mut rng, &seeds[(i % 2) as usize]);
        for b in [blocks, 256] {
            if let Ok(m) = Mapping::decode(&rec, b) {
                maps_ok += 1;
                assert_eq!(Mapping::decode(&m.encode(), b).as_ref(), Ok(&m));
            }
        }
        if i % 8 == 0 {
            let raw = if i % 16 == 0 {
                mutate(&mut rng, &sb_seed[..256.min(sb_seed.len())])
            } else {
                mutate(&mut rng, &sb_seed)
            };
            if let Ok(s) = Superblock::decode(&raw) {
                sbs_ok += 1;
                assert_eq!(Superblock::decode(&s.encode()), Ok(s));
            }
        }
    }
    assert_eq!(
        Superblock::decode(&sb_seed),
        Ok(sb),
        "the seed itself decodes"
    );
    eprintln!(
        "metadata: {n} extent records ({maps_ok} accepted), {} superblocks ({sbs_ok} accepted)",
        n / 8
    );
    assert!(maps_ok > 0);
}

fn uuid_like() -> uuid::Uuid {
    uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0011_2233_4455_6677)
}
