//! Shared vocabulary of every layer: byte sizes and durations as the
//! configuration writes them, the error a configuration section's
//! `validate` returns (naming the key), the I/O hint a request carries down to heat
//! tracking, the reasons a migration moves an extent, and [`snake_json`]
//! (how a configuration section, kebab-case in files, appears in JSON
//! output, where every key is snake_case), how a byte count reads in a
//! message ([`human_bytes`]) and how an error reads with its causes
//! ([`error_text`]). It imports nothing of the crate; everything else may
//! import it.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A byte count written as a number or with a unit (`4GiB`, `512k`, `1 MiB`,
/// `1GB`): binary units (`KiB`..`TiB` and the single letters `K`..`T`)
/// are powers of 1024, decimal ones (`kB`..`TB`) powers of 1000, as
/// coreutils reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

/// Why a size does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid size {0:?}: use a number of bytes or a unit: 64KiB, 1MiB, 4GiB, 1TiB (powers of 1024) or 1MB, 1GB (powers of 1000)")]
pub struct SizeError(pub String);

impl ByteSize {
    /// Parse `123`, `64KiB`, `64K`, `1.5GiB` (powers of 1024) and `64kB`,
    /// `1GB` (powers of 1000: `1GB` is 1000000000 bytes, never 1 GiB).
    pub fn parse(s: &str) -> Result<Self, SizeError> {
        ByteSize::parse_with(s, None)
    }

    /// [`ByteSize::parse`], except that a size that is no whole number of
    /// bytes (`1.24GiB`, as `tierctl status` prints sizes) is rounded, up
    /// or down as `up` says, instead of refused.
    pub fn parse_rounded(s: &str, up: bool) -> Result<Self, SizeError> {
        ByteSize::parse_with(s, Some(up))
    }

    /// The parser of both: `round` says what to do with a fraction of a
    /// byte (`None`: refuse it; `Some(up)`: round up or down).
    fn parse_with(s: &str, round: Option<bool>) -> Result<Self, SizeError> {
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let unit = unit.trim().to_ascii_lowercase();
        let mult: u64 = match unit.as_str() {
            "" | "b" => 1,
            "k" | "kib" => 1 << 10,
            "m" | "mib" => 1 << 20,
            "g" | "gib" => 1 << 30,
            "t" | "tib" => 1 << 40,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            "tb" => 1_000_000_000_000,
            _ => return Err(SizeError(s.to_string())),
        };
        let err = || SizeError(s.to_string());
        if num.is_empty() {
            return Err(err());
        }
        if let Ok(n) = num.parse::<u64>() {
            return n.checked_mul(mult).map(ByteSize).ok_or_else(err);
        }
        let f: f64 = num.parse().map_err(|_| err())?;
        let v = f * mult as f64;
        let v = match round {
            None if v.fract() != 0.0 => return Err(err()),
            None => v,
            Some(true) => v.ceil(),
            Some(false) => v.floor(),
        };
        if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
            return Err(err());
        }
        Ok(ByteSize(v as u64))
    }
}

impl fmt::Display for ByteSize {
    /// In the unit that gives the smallest whole number: the largest
    /// binary unit that divides it (`4GiB`) or the largest decimal one
    /// (`4GB`, not `3906250KiB`), binary on a tie; else in bytes. It parses
    /// back to the same count.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 8] = [
            ("TiB", 1 << 40),
            ("GiB", 1 << 30),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
            ("TB", 1_000_000_000_000),
            ("GB", 1_000_000_000),
            ("MB", 1_000_000),
            ("kB", 1_000),
        ];
        let best = UNITS
            .iter()
            .filter(|(_, unit)| self.0 >= *unit && self.0.is_multiple_of(*unit))
            .min_by_key(|(_, unit)| self.0 / unit);
        match best {
            Some((name, unit)) => write!(f, "{}{}", self.0 / unit, name),
            None => write!(f, "{}", self.0),
        }
    }
}

impl std::str::FromStr for ByteSize {
    type Err = SizeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ByteSize::parse(s)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(ByteSize(n)),
            Raw::S(s) => ByteSize::parse(&s).map_err(serde::de::Error::custom),
        }
    }
}

/// A byte count for a person: binary units with two decimals (`2.00 GiB`),
/// plain bytes below 1 KiB (`512 B`).
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// An error and its causes in one line, `what: why: deeper why`. A cause
/// whose text the line carries already (an error that prints its source
/// and also returns it from `source()`, as many do) is not repeated.
pub fn error_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

/// What the protocol layer knows about a request's place in a stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoHint {
    /// Bytes of contiguous I/O this connection's stream has done up to and
    /// including this request (0 when unknown).
    pub seq_run: u64,
}

/// Why an extent moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// Hot on the HDD.
    Hot,
    /// Prefetched: next to extents in use (its zone is busy).
    Near,
    /// Cold on the SSD, swapped out for a hotter extent.
    Cold,
    /// Idle on the SSD (untouched for `heat.idle-after`), gave way to an
    /// extent in use.
    Idle,
    /// Demoted to restore the SSD reserve.
    Reserve,
    /// Moved to honour a pin.
    Pin,
    /// Moved on an operator's request.
    Manual,
    /// Blocks written back from the SSD write log to their HDD extent.
    Writeback,
    /// Moved off a tier the operator is draining (`tierctl evacuate`).
    Evacuate,
    /// Brought up by a read that missed flash (admission at the miss).
    Admit,
    /// Given an HDD copy to keep the SSD exposure bound
    /// (`durability.ssd-exposure`).
    Exposure,
}

impl Reason {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Hot => "hot",
            Reason::Near => "near",
            Reason::Cold => "cold",
            Reason::Idle => "idle",
            Reason::Reserve => "reserve",
            Reason::Pin => "pin",
            Reason::Manual => "manual",
            Reason::Writeback => "writeback",
            Reason::Evacuate => "evacuate",
            Reason::Admit => "admit",
            Reason::Exposure => "exposure",
        }
    }
}

/// Reasons in counter order.
pub const REASONS: [Reason; 11] = [
    Reason::Hot,
    Reason::Near,
    Reason::Cold,
    Reason::Idle,
    Reason::Reserve,
    Reason::Pin,
    Reason::Manual,
    Reason::Writeback,
    Reason::Evacuate,
    Reason::Admit,
    Reason::Exposure,
];

/// How long the thread reading an NBD connection's next request polls for
/// it before it sleeps, by default (`nbd-poll`): long enough for a client
/// on the same machine to answer a reply with its next request (measured
/// in docs/performance.md). Shared by the server's options and the
/// configuration.
pub const NBD_POLL_DEFAULT: std::time::Duration = std::time::Duration::from_micros(50);

/// Durations in the configuration: a number of seconds or a string with a
/// unit (`50us`, `500ms`, `60s`, `5m`, `1h`).
pub mod duration_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Parse `50us` (or `50µs`), `500ms`, `60s`, `5m`, `1h` or a bare number
    /// of seconds.
    pub fn parse(s: &str) -> Option<Duration> {
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let n: f64 = num.parse().ok()?;
        let secs = match unit.trim() {
            "" | "s" => n,
            "us" | "µs" => n / 1_000_000.0,
            "ms" => n / 1000.0,
            "m" | "min" => n * 60.0,
            "h" => n * 3600.0,
            _ => return None,
        };
        (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
    }

    /// Serialize as a string with a unit.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        if d.subsec_nanos() == 0 {
            s.serialize_str(&format!("{}s", d.as_secs()))
        } else if d.subsec_nanos().is_multiple_of(1_000_000) {
            s.serialize_str(&format!("{}ms", d.as_millis()))
        } else {
            s.serialize_str(&format!("{}us", d.as_micros()))
        }
    }

    /// Deserialize from seconds or a string with a unit.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(f64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) if n.is_finite() && n >= 0.0 => Ok(Duration::from_secs_f64(n)),
            Raw::N(n) => Err(serde::de::Error::custom(format!("invalid duration {n}"))),
            Raw::S(s) => parse(&s).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "invalid duration {s:?}: use a number of seconds or 50us, 500ms, 60s, 5m, 1h"
                ))
            }),
        }
    }
}

/// A configuration value that parses but is not acceptable. Each section's
/// `validate` (`HeatConfig`, `MigrateConfig`, `Config`) returns it with the
/// full key path (`migrate.bandwidth`, `listen`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("configuration key `{key}`: {problem}")]
pub struct InvalidKey {
    /// The key, `table.key` inside a table.
    pub key: &'static str,
    /// What is wrong.
    pub problem: String,
}

impl InvalidKey {
    /// `key` is not acceptable because of `problem`.
    pub fn new(key: &'static str, problem: impl Into<String>) -> Self {
        InvalidKey {
            key,
            problem: problem.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_as_status_prints_them_round_outwards_where_asked() {
        // 1.24 GiB is 1331439861.76 bytes: refused as a size, rounded in a
        // range.
        assert!(ByteSize::parse("1.24GiB").is_err());
        assert_eq!(
            ByteSize::parse_rounded("1.24 GiB", true),
            Ok(ByteSize(1_331_439_862))
        );
        assert_eq!(
            ByteSize::parse_rounded("1.24GiB", false),
            Ok(ByteSize(1_331_439_861))
        );
        assert_eq!(ByteSize::parse_rounded("2MiB", true), Ok(ByteSize(2 << 20)));
        assert!(ByteSize::parse_rounded("1.5XB", true).is_err());
        assert!(ByteSize::parse_rounded("-1GiB", true).is_err());
    }

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(ByteSize::parse("4GiB"), Ok(ByteSize(4 << 30)));
        assert_eq!(ByteSize::parse("64k"), Ok(ByteSize(64 << 10)));
        assert_eq!(ByteSize::parse(" 1 MiB "), Ok(ByteSize(1 << 20)));
        assert_eq!(ByteSize::parse("1.5GiB"), Ok(ByteSize(3 << 29)));
        assert_eq!(ByteSize::parse("12345"), Ok(ByteSize(12345)));
        assert!(ByteSize::parse("4 parsecs").is_err());
        assert!(ByteSize::parse("").is_err());
        assert!(ByteSize::parse("GiB").is_err());
        assert!(ByteSize::parse("99999999999TiB").is_err());
        assert_eq!(ByteSize(4 << 30).to_string(), "4GiB");
        assert_eq!(ByteSize(1000).to_string(), "1kB");
        assert_eq!(ByteSize(1_000_000_000).to_string(), "1GB");
        assert_eq!(ByteSize(12345).to_string(), "12345");
        // Decimal when it reads shorter: `--hdd-size 4GB` logs as 4GB.
        assert_eq!(ByteSize(4_000_000_000).to_string(), "4GB");
        assert_eq!(ByteSize(2_048_000).to_string(), "2000KiB");
        assert_eq!(ByteSize(1 << 20).to_string(), "1MiB");
    }

    #[test]
    fn bytes_read_in_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(2 << 30), "2.00 GiB");
        assert_eq!(human_bytes(1536), "1.50 KiB");
    }

    #[test]
    fn an_error_chain_reads_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("opening device x: {0}")]
        struct Repeats(#[source] std::io::Error);
        #[derive(Debug, thiserror::Error)]
        #[error("formatting")]
        struct Outer(#[source] Repeats);
        let e = Outer(Repeats(std::io::Error::other("no such file")));
        assert_eq!(error_text(&e), "formatting: opening device x: no such file");
    }

    #[test]
    fn decimal_units_are_powers_of_ten() {
        assert_eq!(ByteSize::parse("1GB"), Ok(ByteSize(1_000_000_000)));
        assert_eq!(ByteSize::parse("1gb"), Ok(ByteSize(1_000_000_000)));
        assert_eq!(ByteSize::parse("64kB"), Ok(ByteSize(64_000)));
        assert_eq!(ByteSize::parse("1.5MB"), Ok(ByteSize(1_500_000)));
        assert_eq!(ByteSize::parse("2TB"), Ok(ByteSize(2_000_000_000_000)));
        assert_ne!(ByteSize::parse("1GB"), ByteSize::parse("1GiB"));
        // What prints reads back as the same number of bytes.
        for s in ["1GB", "1GiB", "64kB", "12345"] {
            let b = ByteSize::parse(s).unwrap();
            assert_eq!(ByteSize::parse(&b.to_string()), Ok(b), "{s}");
        }
    }

    #[test]
    fn durations_parse_and_print_in_their_unit() {
        use std::time::Duration;
        let p = duration_secs::parse;
        assert_eq!(p("50us"), Some(Duration::from_micros(50)));
        assert_eq!(p("50µs"), Some(Duration::from_micros(50)));
        assert_eq!(p("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(p("2"), Some(Duration::from_secs(2)));
        assert_eq!(p("5m"), Some(Duration::from_secs(300)));
        assert_eq!(p("5 parsecs"), None);
        let show = |d: Duration| {
            let mut out = Vec::new();
            let mut ser = serde_json::Serializer::new(&mut out);
            duration_secs::serialize(&d, &mut ser).expect("a string serializes");
            String::from_utf8(out).expect("JSON is UTF-8")
        };
        assert_eq!(show(Duration::from_micros(50)), "\"50us\"");
        assert_eq!(show(Duration::from_millis(1500)), "\"1500ms\"");
        assert_eq!(show(Duration::from_secs(30)), "\"30s\"");
    }
}

/// Serde helpers for a configuration section inside JSON output: its keys
/// are kebab-case in configuration files and snake_case in every `--json`
/// output and control answer (`#[serde(with = "crate::units::snake_json")]`).
pub mod snake_json {
    use serde::de::DeserializeOwned;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value;

    /// Rename every object key of `v`, depth first.
    pub fn rename_keys(v: Value, f: &impl Fn(&str) -> String) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.into_iter()
                    .map(|(k, v)| (f(&k), rename_keys(v, f)))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.into_iter().map(|v| rename_keys(v, f)).collect()),
            other => other,
        }
    }

    /// Write `t` with snake_case keys.
    pub fn serialize<T: Serialize, S: Serializer>(t: &T, s: S) -> Result<S::Ok, S::Error> {
        let v = serde_json::to_value(t).map_err(serde::ser::Error::custom)?;
        rename_keys(v, &|k| k.replace('-', "_")).serialize(s)
    }

    /// Read `T` written by [`serialize`].
    pub fn deserialize<'de, T: DeserializeOwned, D: Deserializer<'de>>(
        d: D,
    ) -> Result<T, D::Error> {
        let v = Value::deserialize(d)?;
        serde_json::from_value(rename_keys(v, &|k| k.replace('_', "-")))
            .map_err(serde::de::Error::custom)
    }
}
