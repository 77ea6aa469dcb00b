//! Extent records kept [`GROUP`] to a sled record: the layout of a group's
//! value and the edits the sled store makes to it.
//!
//! Why groups: sled keeps a tree node's records in memory with its own
//! bookkeeping around each one, about 170–240 bytes a record beside the
//! record's own bytes (sled 0.34, measured with one small record per key:
//! 171 B a record for 10-byte values, 238 B for 39-byte ones). A volume
//! whose every extent is mapped has one record per extent, so sled alone
//! took about 400 bytes an extent in the daemon. Sixteen extents to a
//! record bring sled's share to about 27 bytes an extent with 10-byte
//! records (the same measurement), at the price of rewriting the group's
//! other records (a few hundred bytes) when one of them changes.
//!
//! A group's value is its extents' entries in index order, each
//! `[offset in the group: u8][record length: u16 LE][record]`. A group
//! with no entries is not stored.

use super::{StoreError, StoreResult};

/// Extents per group.
pub const GROUP: u64 = 16;

/// The sled key of the group holding `index`.
pub fn group_key(index: u64) -> [u8; 8] {
    (index / GROUP).to_be_bytes()
}

/// A key of eight big-endian bytes.
pub fn read_key(k: &[u8]) -> StoreResult<u64> {
    let key: [u8; 8] = k
        .try_into()
        .map_err(|_| StoreError::Backend(format!("extent key of {} bytes", k.len())))?;
    Ok(u64::from_be_bytes(key))
}

/// The entries of group `group` (its extents' indexes and records).
pub fn decode_group(group: u64, mut v: &[u8]) -> StoreResult<Vec<(u64, Vec<u8>)>> {
    let damaged =
        |why: &str| StoreError::Backend(format!("extent group {group} is damaged: {why}"));
    let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
    while !v.is_empty() {
        if v.len() < 3 {
            return Err(damaged("entry header cut short"));
        }
        let off = u64::from(v[0]);
        let len = usize::from(u16::from_le_bytes([v[1], v[2]]));
        if off >= GROUP {
            return Err(damaged("offset past the group"));
        }
        let index = group * GROUP + off;
        if out.last().is_some_and(|(last, _)| *last >= index) {
            return Err(damaged("entries out of order"));
        }
        let rest = &v[3..];
        if rest.len() < len {
            return Err(damaged("record cut short"));
        }
        out.push((index, rest[..len].to_vec()));
        v = &rest[len..];
    }
    Ok(out)
}

/// Set (`Some`) or remove (`None`) the entry of `index`, keeping the
/// entries in index order.
pub fn set_entry(entries: &mut Vec<(u64, Vec<u8>)>, index: u64, record: Option<&[u8]>) {
    match (entries.binary_search_by_key(&index, |e| e.0), record) {
        (Ok(i), Some(r)) => entries[i].1 = r.to_vec(),
        (Ok(i), None) => {
            entries.remove(i);
        }
        (Err(i), Some(r)) => entries.insert(i, (index, r.to_vec())),
        (Err(_), None) => {}
    }
}

/// A group's value from its entries (all of one group, in index order).
pub fn encode_group(entries: &[(u64, Vec<u8>)]) -> StoreResult<Vec<u8>> {
    let mut v = Vec::with_capacity(entries.iter().map(|e| 3 + e.1.len()).sum());
    for (index, record) in entries {
        let len = u16::try_from(record.len()).map_err(|_| {
            StoreError::Backend(format!(
                "extent {index}: a record of {} bytes is longer than a group entry holds",
                record.len()
            ))
        })?;
        // The remainder is below GROUP (16), so it fits a byte.
        v.push((index % GROUP) as u8);
        v.extend_from_slice(&len.to_le_bytes());
        v.extend_from_slice(record);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_round_trips_and_keeps_index_order() {
        let mut e = Vec::new();
        set_entry(&mut e, 37, Some(b"c"));
        set_entry(&mut e, 33, Some(b"a"));
        set_entry(&mut e, 35, Some(b""));
        set_entry(&mut e, 33, Some(b"aa"));
        set_entry(&mut e, 40, None);
        let v = encode_group(&e).unwrap();
        let back = decode_group(2, &v).unwrap();
        assert_eq!(
            back,
            vec![(33, b"aa".to_vec()), (35, Vec::new()), (37, b"c".to_vec())]
        );
        set_entry(&mut e, 35, None);
        assert_eq!(e.iter().map(|x| x.0).collect::<Vec<_>>(), vec![33, 37]);
        assert_eq!(group_key(37), 2u64.to_be_bytes());
    }

    #[test]
    fn a_damaged_group_is_an_error_naming_it() {
        let v = encode_group(&[(33, b"abc".to_vec()), (34, b"d".to_vec())]).unwrap();
        for cut in [1, 2, 5, v.len() - 1] {
            let e = decode_group(2, &v[..cut]).unwrap_err().to_string();
            assert!(e.contains("extent group 2 is damaged"), "{cut}: {e}");
        }
        let mut swapped = encode_group(&[(34, b"d".to_vec())]).unwrap();
        swapped.extend(encode_group(&[(33, b"a".to_vec())]).unwrap());
        assert!(decode_group(2, &swapped)
            .unwrap_err()
            .to_string()
            .contains("out of order"));
        let mut far = v.clone();
        far[0] = 16;
        assert!(decode_group(2, &far)
            .unwrap_err()
            .to_string()
            .contains("past the group"));
        assert!(encode_group(&[(1, vec![0; 70_000])])
            .unwrap_err()
            .to_string()
            .contains("longer than a group entry holds"));
    }
}
