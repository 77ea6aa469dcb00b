//! The SVG line charts, written by hand: a chart's panels (one quantity
//! each, stacked, sharing the x axis), their axes with round ticks (from
//! [`super::ticks`]), and each panel's legend to the right of its frame.
//! The canvas is sized from estimated text widths (character classes of a
//! wide sans-serif font, DejaVu Sans) so that no title, label or legend
//! runs past its edge, whatever the series names.

use std::fmt::Write as _;

use super::ticks::{self, Axis};
use crate::suites::Chart;

/// Font size of labels, ticks and legends.
const FONT: f64 = 12.0;
/// Font size of the title.
const TITLE_FONT: f64 = 15.0;
/// Width of the plotting frame (wider if the title needs it).
const PLOT_W: f64 = 540.0;
/// Height of the frame of a chart with one panel.
const ONE_PANEL_H: f64 = 320.0;
/// Height of each frame of a chart with several panels.
const STACKED_H: f64 = 190.0;
/// Space between stacked panels.
const PANEL_GAP: f64 = 16.0;
/// Space above the first frame (the title).
const TOP: f64 = 44.0;
/// Space below the last frame (x tick labels and the x label).
const BOTTOM: f64 = 50.0;
/// Column of the rotated y labels, left of the tick labels.
const Y_LABEL_COL: f64 = 30.0;
/// Gap between a frame and its legend; the legend's inner spacing.
const LEGEND_GAP: f64 = 14.0;
/// Legend: the sample line's length.
const SWATCH: f64 = 22.0;
/// Legend: the sample line plus the gap to the name.
const SWATCH_TEXT: f64 = 28.0;
/// Legend row height.
const LEGEND_ROW: f64 = 18.0;
/// A series with at most this many points gets a marker per point.
const MARKERS_UP_TO: usize = 40;
/// Series colours, in order over all panels.
const COLORS: [&str; 6] = [
    "#d62728", "#1f77b4", "#7f7f7f", "#2ca02c", "#9467bd", "#ff7f0e",
];
/// Series dash patterns, in the same order: where two series coincide (the
/// hybrid at the pure SSD's speed) the one below shows through the gaps.
/// A seventh series takes the first colour with the second dash, and so on.
const DASHES: [&str; 6] = ["", "8 4", "2 3", "12 4 2 4", "4 4", "1 3"];

/// (series name, points).
type Series = (String, Vec<(f64, f64)>);

/// One panel to draw: the first comes from the chart's own fields, the
/// rest from `below`.
struct PanelView<'a> {
    y_label: &'a str,
    y_max: Option<f64>,
    series: &'a [Series],
}

fn panels(c: &Chart) -> Vec<PanelView<'_>> {
    let mut v = vec![PanelView {
        y_label: &c.y_label,
        y_max: None,
        series: &c.series,
    }];
    v.extend(c.below.iter().map(|p| PanelView {
        y_label: &p.y_label,
        y_max: p.y_max,
        series: &p.series,
    }));
    v
}

/// Estimated width of `s` at font size `size`: per character, an upper
/// bound of DejaVu Sans's advance for its class (the widest common
/// sans-serif; narrower fonts fit inside the estimate).
pub(super) fn text_width(s: &str, size: f64) -> f64 {
    let em: f64 = s
        .chars()
        .map(|ch| match ch {
            'i' | 'j' | 'l' | 'I' | '.' | ',' | ':' | ';' | '\'' | '|' | '!' => 0.34,
            'f' | 't' | 'r' | '(' | ')' | '[' | ']' | '/' | '-' | ' ' => 0.42,
            'm' | 'w' | 'M' | 'W' | '%' | '@' => 1.0,
            c if c.is_ascii_uppercase() => 0.8,
            _ => 0.66,
        })
        .sum();
    em * size
}

/// Horizontal anchor of a text.
#[derive(Clone, Copy)]
enum Anchor {
    Start,
    Middle,
    End,
}

/// A `<text>` with its font size and anchor spelled out (the tests read
/// them back to check that every text fits the canvas).
fn text(s: &mut String, x: f64, y: f64, size: f64, anchor: Anchor, vertical: bool, body: &str) {
    let anchor = match anchor {
        Anchor::Start => "start",
        Anchor::Middle => "middle",
        Anchor::End => "end",
    };
    let rotate = if vertical {
        format!(r#" transform="rotate(-90 {x:.1} {y:.1})""#)
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}" text-anchor="{anchor}"{rotate}>{}</text>"#,
        esc(body)
    );
}

/// The finite (min, max) of `values`, if any.
fn range(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.filter(|v| v.is_finite()).fold(None, |r, v| match r {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// The x axis shared by every panel. A linear one starts at 0 when the data
/// start above 0 but no further from it than their own span (seconds from
/// 1, a fill from 20 %), and steps by whole numbers when the data are
/// whole numbers.
fn x_axis(c: &Chart, views: &[PanelView<'_>]) -> Axis {
    let xs: Vec<f64> = views
        .iter()
        .flat_map(|p| p.series.iter())
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .filter(|x| x.is_finite() && (!c.log_x || *x > 0.0))
        .collect();
    let whole = !xs.is_empty() && xs.iter().all(|x| x.fract() == 0.0);
    match (range(xs.into_iter()), c.log_x) {
        (Some((lo, hi)), true) => ticks::log2(lo, hi, 12),
        (None, true) => ticks::log2(1.0, 2.0, 12),
        (Some((lo, hi)), false) => {
            let lo = if lo > 0.0 && lo <= hi - lo { 0.0 } else { lo };
            ticks::linear_min_step(lo, hi, 8, if whole { 1.0 } else { 0.0 })
        }
        (None, false) => ticks::linear(0.0, 1.0, 8),
    }
}

/// Write `names` on the x axis: each at its value, in place of the numeric
/// ticks within 6 % of the axis's width of it.
fn name_x_ticks(axis: &mut Axis, names: &[(f64, String)]) {
    for (v, name) in names {
        let at = axis.frac(*v);
        if !(0.0..=1.0).contains(&at) {
            continue;
        }
        let (keep, _): (Vec<_>, Vec<_>) = std::mem::take(&mut axis.ticks)
            .into_iter()
            .partition(|t| (axis.frac(t.0) - at).abs() >= 0.06);
        axis.ticks = keep;
        axis.ticks.push((*v, name.clone()));
        axis.ticks.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
}

/// A panel's y axis: from 0 (or below, for negative data) to the first
/// round tick at or above the data and the panel's `y_max`.
fn y_axis(p: &PanelView<'_>) -> Axis {
    let ys = p.series.iter().flat_map(|s| s.1.iter().map(|p| p.1));
    let (lo, hi) = range(ys).unwrap_or((0.0, 0.0));
    let hi = hi.max(p.y_max.unwrap_or(0.0)).max(0.0);
    ticks::linear(lo.min(0.0), hi, 4)
}

/// The chart as an SVG document.
pub fn svg(c: &Chart) -> String {
    let views = panels(c);
    let mut xa = x_axis(c, &views);
    name_x_ticks(&mut xa, &c.x_names);
    let yas: Vec<Axis> = views.iter().map(y_axis).collect();
    let widest = |labels: &mut dyn Iterator<Item = &String>| {
        labels.map(|l| text_width(l, FONT)).fold(0.0, f64::max)
    };
    let y_tick_w = widest(&mut yas.iter().flat_map(|a| a.ticks.iter().map(|t| &t.1)));
    let x_tick_w = widest(&mut xa.ticks.iter().map(|t| &t.1));
    let ml = Y_LABEL_COL + y_tick_w + 10.0;
    let names = views.iter().flat_map(|p| p.series.iter().map(|s| &s.0));
    let legend_w = SWATCH_TEXT + widest(&mut names.into_iter());
    let mr = (LEGEND_GAP + legend_w + LEGEND_GAP).max(x_tick_w / 2.0 + 6.0);
    let title_w = text_width(&c.title, TITLE_FONT);
    let x_label_w = text_width(&c.x_label, FONT);
    let plot_w = PLOT_W.max(title_w + 20.0 - ml - mr).max(x_label_w + 20.0);
    let w = (ml + plot_w + mr).ceil();
    let base_h = if views.len() == 1 {
        ONE_PANEL_H
    } else {
        STACKED_H
    };
    let heights: Vec<f64> = views
        .iter()
        .map(|p| {
            base_h
                .max(text_width(p.y_label, FONT) + 16.0)
                .max(p.series.len() as f64 * LEGEND_ROW + 10.0)
        })
        .collect();
    let frames_h: f64 = heights.iter().sum::<f64>() + PANEL_GAP * (views.len() - 1) as f64;
    let h = (TOP + frames_h + BOTTOM).ceil();
    let px = |x: f64| ml + xa.frac(x) * plot_w;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="{FONT}">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    text(
        &mut s,
        w / 2.0,
        24.0,
        TITLE_FONT,
        Anchor::Middle,
        false,
        &c.title,
    );
    let mut top = TOP;
    let mut color = 0;
    for (i, (p, ya)) in views.iter().zip(&yas).enumerate() {
        let ph = heights[i];
        let bottom = top + ph;
        let py = |y: f64| bottom - ya.frac(y) * ph;
        let _ = writeln!(s, r#"<g class="panel" data-y-label="{}">"#, esc(p.y_label));
        for (v, label) in &ya.ticks {
            let y = py(*v);
            let _ = writeln!(
                s,
                r##"<line x1="{ml:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##,
                ml + plot_w
            );
            text(&mut s, ml - 6.0, y + 4.0, FONT, Anchor::End, false, label);
        }
        for (v, _) in &xa.ticks {
            let x = px(*v);
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{bottom:.1}" stroke="#eee"/>"##
            );
        }
        let _ = writeln!(
            s,
            r#"<rect x="{ml:.1}" y="{top:.1}" width="{plot_w:.1}" height="{ph:.1}" fill="none" stroke="black"/>"#
        );
        text(
            &mut s,
            16.0,
            top + ph / 2.0,
            FONT,
            Anchor::Middle,
            true,
            p.y_label,
        );
        for (k, (name, pts)) in p.series.iter().enumerate() {
            let col = COLORS[color % COLORS.len()];
            // Past the sixth series the dashes shift by one per round of
            // colours, so no two of the first 36 look alike.
            let dash = match DASHES[(color + color / COLORS.len()) % DASHES.len()] {
                "" => String::new(),
                d => format!(r#" stroke-dasharray="{d}""#),
            };
            color += 1;
            let finite: Vec<(f64, f64)> = pts
                .iter()
                .copied()
                .filter(|(x, y)| x.is_finite() && y.is_finite() && (!c.log_x || *x > 0.0))
                .map(|(x, y)| (px(x), py(y)))
                .collect();
            if !finite.is_empty() {
                let path: Vec<String> = finite
                    .iter()
                    .map(|(x, y)| format!("{x:.1},{y:.1}"))
                    .collect();
                let _ = writeln!(
                    s,
                    r#"<polyline fill="none" stroke="{col}" stroke-width="2"{dash} points="{}"/>"#,
                    path.join(" ")
                );
            }
            if finite.len() <= MARKERS_UP_TO {
                for (x, y) in &finite {
                    let _ = writeln!(
                        s,
                        r#"<circle cx="{x:.1}" cy="{y:.1}" r="2.5" fill="{col}"/>"#
                    );
                }
            }
            let lx = ml + plot_w + LEGEND_GAP;
            let ly = top + 14.0 + LEGEND_ROW * k as f64;
            let _ = writeln!(
                s,
                r#"<line x1="{lx:.1}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="{col}" stroke-width="2"{dash}/>"#,
                ly - 4.0,
                lx + SWATCH
            );
            text(
                &mut s,
                lx + SWATCH_TEXT,
                ly,
                FONT,
                Anchor::Start,
                false,
                name,
            );
        }
        s.push_str("</g>\n");
        top = bottom + PANEL_GAP;
    }
    let bottom = TOP + frames_h;
    for (v, label) in &xa.ticks {
        text(
            &mut s,
            px(*v),
            bottom + 16.0,
            FONT,
            Anchor::Middle,
            false,
            label,
        );
    }
    text(
        &mut s,
        ml + plot_w / 2.0,
        bottom + 38.0,
        FONT,
        Anchor::Middle,
        false,
        &c.x_label,
    );
    s.push_str("</svg>\n");
    s
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
#[path = "svg_tests.rs"]
mod tests;
