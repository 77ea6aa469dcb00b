//! Axis ticks for the SVG charts: "nice" steps (1, 2 or 5 times a power of
//! ten) for linear axes, powers of two for logarithmic ones, and tick labels
//! with no more decimals than the step needs (`0, 2000, 4000`, `0, 0.5,
//! 1.0`, `20k, 40k`; never `5338` or `7.18`).

/// An axis: the range it spans and its ticks (value, label), in order. The
/// range runs from the first tick to the last, so the data lie inside it.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// Lowest value of the axis (its first tick).
    pub lo: f64,
    /// Highest value of the axis (its last tick).
    pub hi: f64,
    /// Logarithmic (base 2): positions go by log2 of the value.
    pub log: bool,
    /// (value, label).
    pub ticks: Vec<(f64, String)>,
}

impl Axis {
    /// Where `v` lies on the axis, 0 at `lo` to 1 at `hi`.
    pub fn frac(&self, v: f64) -> f64 {
        let t = |x: f64| if self.log { x.max(1e-12).log2() } else { x };
        let span = t(self.hi) - t(self.lo);
        if span > 0.0 {
            (t(v) - t(self.lo)) / span
        } else {
            0.5
        }
    }
}

/// The 1, 2 or 5 × 10^k nearest `raw` (1 up to 1.5, 2 up to 3, 5 up to 7,
/// then 10; 1 for a `raw` that is not a positive number).
pub fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let m = if f < 1.5 {
        1.0
    } else if f < 3.0 {
        2.0
    } else if f < 7.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// A linear axis over `[lo, hi]` with about `target` steps (from 2/3 to
/// 1.5 times as many): from the last tick at or below `lo` to the first at
/// or above `hi`.
pub fn linear(lo: f64, hi: f64, target: usize) -> Axis {
    linear_min_step(lo, hi, target, 0.0)
}

/// [`linear`] with steps of at least `min_step` (itself 1, 2 or 5 ×
/// 10^k): 1 for data that are whole numbers (streams, queue depths).
pub fn linear_min_step(lo: f64, hi: f64, target: usize, min_step: f64) -> Axis {
    let (mut lo, mut hi) = if lo.is_finite() && hi.is_finite() && lo <= hi {
        (lo, hi)
    } else {
        (0.0, 1.0)
    };
    if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
        // One value: a unit around it (or above it, from 0).
        if lo == 0.0 {
            hi = 1.0;
        } else {
            let d = nice_step(lo.abs() / 2.0);
            lo -= d;
            hi += d;
        }
    }
    let step = nice_step((hi - lo) / target.max(1) as f64).max(min_step);
    let first = (lo / step + 1e-9).floor() as i64;
    let last = (hi / step - 1e-9).ceil() as i64;
    let values: Vec<f64> = (first..=last).map(|i| i as f64 * step).collect();
    let labels = linear_labels(&values, step);
    Axis {
        lo: values.first().copied().unwrap_or(lo),
        hi: values.last().copied().unwrap_or(hi),
        log: false,
        ticks: values.into_iter().zip(labels).collect(),
    }
}

/// A base-2 logarithmic axis over `[lo, hi]` (both > 0): ticks at the
/// powers of two from the last at or below `lo` to the first at or above
/// `hi`, every second (fourth, ...) one if there would be more than
/// `max_ticks`.
pub fn log2(lo: f64, hi: f64, max_ticks: usize) -> Axis {
    let lo = if lo.is_finite() && lo > 0.0 { lo } else { 1.0 };
    let hi = if hi.is_finite() && hi >= lo { hi } else { lo };
    let first = (lo.log2() + 1e-9).floor() as i32;
    let last = ((hi.log2() - 1e-9).ceil() as i32).max(first + 1);
    let span = last - first;
    let every = (span + max_ticks.max(2) as i32 - 2) / (max_ticks.max(2) as i32 - 1);
    let every = every.max(1);
    let last = first + (span + every - 1) / every * every;
    let ticks = (first..=last)
        .step_by(every as usize)
        .map(|e| {
            let v = 2f64.powi(e);
            (v, plain(v))
        })
        .collect();
    Axis {
        lo: 2f64.powi(first),
        hi: 2f64.powi(last),
        log: true,
        ticks,
    }
}

/// Labels for ticks `step` apart: a `k` or `M` suffix once the largest is
/// 10 000 or 10 000 000, and as many decimals as the step has.
fn linear_labels(values: &[f64], step: f64) -> Vec<String> {
    let top = values.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let (div, suffix) = if top >= 1e7 {
        (1e6, "M")
    } else if top >= 1e4 {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    let s = step / div;
    let decimals = if s >= 1.0 {
        0
    } else {
        (-s.log10() - 1e-9).ceil().max(0.0) as usize
    };
    values
        .iter()
        .map(|v| {
            if v.abs() < step * 1e-6 {
                "0".to_string()
            } else {
                format!("{:.*}{suffix}", decimals, v / div)
            }
        })
        .collect()
}

/// `v` with no trailing zeros (0.5, 2, 256, 65536), for the ticks of a
/// logarithmic axis.
fn plain(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(a: &Axis) -> Vec<&str> {
        a.ticks.iter().map(|t| t.1.as_str()).collect()
    }

    #[test]
    fn steps_are_one_two_or_five_times_a_power_of_ten() {
        for (raw, want) in [
            (0.06, 0.05),
            (0.08, 0.1),
            (0.25, 0.2),
            (1.0, 1.0),
            (1.4, 1.0),
            (2.0, 2.0),
            (3.1, 5.0),
            (6.0, 5.0),
            (7.5, 10.0),
            (1334.5, 1000.0),
            (40_000.0, 50_000.0),
        ] {
            let got = nice_step(raw);
            assert!((got - want).abs() < want * 1e-9, "{raw}: {got} != {want}");
        }
    }

    #[test]
    fn the_axis_ends_at_the_first_tick_at_or_above_the_data() {
        let a = linear(0.0, 5338.0, 4);
        assert_eq!(
            labels(&a),
            ["0", "1000", "2000", "3000", "4000", "5000", "6000"]
        );
        assert_eq!(a.hi, 6000.0);
        let a = linear(0.0, 7.18, 4);
        assert_eq!(labels(&a), ["0", "2", "4", "6", "8"]);
        let a = linear(0.0, 6000.0, 4);
        assert_eq!(a.hi, 6000.0);
        let a = linear(0.0, 1.3, 4);
        assert_eq!(labels(&a), ["0", "0.5", "1.0", "1.5"]);
        let a = linear(0.0, 0.13, 4);
        assert_eq!(labels(&a), ["0", "0.05", "0.10", "0.15"]);
        let a = linear(0.0, 100.0, 4);
        assert_eq!(labels(&a), ["0", "20", "40", "60", "80", "100"]);
        let a = linear(0.0, 43_210.0, 4);
        assert_eq!(labels(&a), ["0", "10k", "20k", "30k", "40k", "50k"]);
        let a = linear(0.0, 11_100.0, 4);
        assert_eq!(labels(&a), ["0", "2k", "4k", "6k", "8k", "10k", "12k"]);
        let a = linear(20.0, 120.0, 8);
        assert_eq!(a.lo, 20.0);
        assert_eq!(a.hi, 120.0);
        let a = linear_min_step(1.0, 4.0, 8, 1.0);
        assert_eq!(labels(&a), ["1", "2", "3", "4"]);
        let a = linear(1.02, 57.3, 8);
        assert_eq!(a.lo, 0.0);
        assert_eq!(a.hi, 60.0);
    }

    #[test]
    fn degenerate_ranges_still_give_an_axis() {
        let a = linear(0.0, 0.0, 5);
        assert_eq!((a.lo, a.hi), (0.0, 1.0));
        let a = linear(f64::NAN, 3.0, 5);
        assert_eq!((a.lo, a.hi), (0.0, 1.0));
        let a = linear(4.0, 4.0, 5);
        assert!(a.lo < 4.0 && a.hi > 4.0, "{a:?}");
    }

    #[test]
    fn log_axes_tick_at_powers_of_two() {
        let a = log2(0.5, 256.0, 12);
        assert_eq!(
            labels(&a),
            ["0.5", "1", "2", "4", "8", "16", "32", "64", "128", "256"]
        );
        let a = log2(1.0, 32.0, 12);
        assert_eq!(labels(&a), ["1", "2", "4", "8", "16", "32"]);
        assert_eq!((a.frac(1.0), a.frac(32.0)), (0.0, 1.0));
        let a = log2(1.0, 65_536.0, 6);
        assert_eq!(labels(&a), ["1", "16", "256", "4096", "65536"]);
        let a = log2(1.0, 40_000.0, 6);
        assert_eq!(labels(&a), ["1", "16", "256", "4096", "65536"]);
    }
}
