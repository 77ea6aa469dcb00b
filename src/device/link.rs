//! The measured link of a remote tier: [`LinkMeter`] estimates the round
//! trip (from operations of at most 64 KiB) and the bandwidth (from
//! operations of 256 KiB or more, their time above the round trip) of the
//! operations a device serves, as exponentially weighted averages. A
//! remote device reports it through [`super::BlockDevice::link`], and the
//! migrator sizes its budget with it: measured, never configured.

use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// Operations this long or shorter time the round trip.
const SMALL: u64 = 64 << 10;
/// Operations this long or longer time the bandwidth.
const LARGE: u64 = 256 << 10;
/// Weight of a new round-trip sample.
const RTT_WEIGHT: f64 = 0.125;
/// Weight of a new bandwidth sample.
const BW_WEIGHT: f64 = 0.25;

/// What a link is measured to do.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LinkEstimate {
    /// Round trip of a small request, seconds.
    pub rtt_secs: f64,
    /// Bytes per second of a large transfer beyond its round trip.
    pub bandwidth: f64,
    /// Operations measured.
    pub samples: u64,
}

#[derive(Debug, Default)]
struct State {
    rtt: Option<f64>,
    bandwidth: Option<f64>,
    samples: u64,
}

/// Estimates a link from the operations timed through it.
#[derive(Debug, Default)]
pub struct LinkMeter {
    state: Mutex<State>,
}

fn ewma(old: Option<f64>, sample: f64, weight: f64) -> f64 {
    match old {
        Some(o) => o + weight * (sample - o),
        None => sample,
    }
}

impl LinkMeter {
    /// Note a read or write of `len` bytes that took `took`.
    pub fn record(&self, len: u64, took: Duration) {
        let secs = took.as_secs_f64();
        let mut s = self.state.lock();
        s.samples += 1;
        if len <= SMALL {
            s.rtt = Some(ewma(s.rtt, secs, RTT_WEIGHT));
        } else if len >= LARGE {
            // The transfer's own time: above the round trip, and never
            // below a microsecond (a cached answer is not infinitely fast).
            let wire = (secs - s.rtt.unwrap_or(0.0)).max(secs / 2.0).max(1e-6);
            s.bandwidth = Some(ewma(s.bandwidth, len as f64 / wire, BW_WEIGHT));
        }
    }

    /// The estimate, once both a small and a large operation were timed.
    pub fn estimate(&self) -> Option<LinkEstimate> {
        let s = self.state.lock();
        Some(LinkEstimate {
            rtt_secs: s.rtt?,
            bandwidth: s.bandwidth?,
            samples: s.samples,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_from_small_operations_and_bandwidth_above_it() {
        let m = LinkMeter::default();
        assert_eq!(m.estimate(), None);
        for _ in 0..50 {
            m.record(4096, Duration::from_micros(1000));
        }
        assert_eq!(m.estimate(), None, "no large transfer yet");
        // 1 MiB in 1 ms + 10 ms: 100 MiB/s beyond the round trip.
        for _ in 0..50 {
            m.record(1 << 20, Duration::from_millis(11));
        }
        let e = m.estimate().expect("both measured");
        assert!((e.rtt_secs - 0.001).abs() < 1e-6, "{e:?}");
        let mib_s = e.bandwidth / f64::from(1u32 << 20);
        assert!((mib_s - 100.0).abs() < 1.0, "{mib_s}");
        assert_eq!(e.samples, 100);
        // It follows a change: the link slows to 10 MiB/s.
        for _ in 0..50 {
            m.record(1 << 20, Duration::from_millis(101));
        }
        let mib_s = m.estimate().expect("measured").bandwidth / f64::from(1u32 << 20);
        assert!((mib_s - 10.0).abs() < 0.5, "{mib_s}");
    }
}
