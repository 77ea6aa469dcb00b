//! Tests of the SVG charts: every text inside the canvas, round ticks, one
//! panel per quantity.

use super::super::check::{
    label_value, layout_problems, round_ticks, texts, x_ticks, y_ticks, Text,
};
use super::*;
use crate::suites::Panel;

/// Every text of `svg` inside its canvas, the ticks round; returns the
/// texts.
fn assert_layout_ok(svg: &str) -> Vec<Text> {
    let problems = layout_problems(svg);
    assert!(problems.is_empty(), "{problems:#?}\n{svg}");
    texts(svg).expect("reading the texts back")
}

fn assert_round(labels: &[String]) -> (f64, f64) {
    round_ticks(labels).unwrap_or_else(|e| panic!("{e}"))
}

fn series(name: &str, pts: &[(f64, f64)]) -> (String, Vec<(f64, f64)>) {
    (name.to_string(), pts.to_vec())
}

fn chart(title: &str, log_x: bool, series: Vec<(String, Vec<(f64, f64)>)>) -> Chart {
    Chart {
        name: "t".into(),
        title: title.into(),
        x_label: "seconds".into(),
        y_label: "IOPS".into(),
        log_x,
        series,
        x_names: Vec::new(),
        below: Vec::new(),
    }
}

fn two_panels() -> Chart {
    let t: Vec<f64> = (1..=60).map(f64::from).collect();
    let mut c = chart(
        "Hot-set shift: hybrid IOPS and share of the new hot set on the SSD",
        false,
        vec![series(
            "hybrid",
            &t.iter().map(|t| (*t, 5338.0 + t * 3.7)).collect::<Vec<_>>(),
        )],
    );
    c.below.push(Panel {
        y_label: "new hot set on the SSD (%)".into(),
        y_max: Some(100.0),
        series: vec![
            series(
                "every extent",
                &t.iter().map(|t| (*t, t * 0.9)).collect::<Vec<_>>(),
            ),
            series(
                "its top tenth",
                &t.iter()
                    .map(|t| (*t, (t * 3.0).min(100.0)))
                    .collect::<Vec<_>>(),
            ),
        ],
    });
    c
}

#[test]
fn long_series_names_and_titles_stay_inside_the_canvas() {
    let long = "a series name far longer than the old 170 px right margin had room for";
    let c = chart(
        "A title so long that it would not fit into the default width of the chart at all, not even nearly",
        false,
        vec![
            series(long, &[(0.0, 1.0), (10.0, 2.0)]),
            series("WWWWWWWWWWWWWWWWWWWWWWWWWWWWWW %%%", &[(0.0, 3.0)]),
            series("short", &[(5.0, 7.18)]),
        ],
    );
    let svg = svg(&c);
    let all = assert_layout_ok(&svg);
    assert!(all.iter().any(|t| t.body == long), "legend entry missing");
}

#[test]
fn every_text_is_inside_the_canvas() {
    let big: Vec<(f64, f64)> = (0..10).map(|i| (f64::from(i) * 3.3, 123_456.0)).collect();
    for c in [
        two_panels(),
        chart("big numbers", false, vec![series("pure-ssd", &big)]),
        chart(
            "log x",
            true,
            vec![series("hybrid", &[(0.5, 1.0), (256.0, 7.18)])],
        ),
        chart("empty", false, vec![series("hybrid", &[])]),
        chart("none", false, Vec::new()),
        chart(
            "not finite",
            false,
            vec![series("x", &[(f64::NAN, 1.0), (1.0, f64::INFINITY)])],
        ),
    ] {
        assert_layout_ok(&svg(&c));
    }
}

#[test]
fn ticks_are_round_and_the_axis_ends_at_the_first_tick_above_the_data() {
    let c = chart(
        "t",
        false,
        vec![series("a", &[(0.0, 10.0), (3.0, 5338.0), (7.18, 200.0)])],
    );
    let svg = svg(&c);
    let panels = y_ticks(&svg).expect("y ticks");
    assert_eq!(panels.len(), 1);
    let (lo, hi) = assert_round(&panels[0]);
    assert_eq!((lo, hi), (0.0, 6000.0), "{:?}", panels[0]);
    for t in texts(&svg).expect("texts") {
        assert!(
            !t.body.contains("5338") && !t.body.contains("7.18"),
            "a data value as a tick label: {t:?}"
        );
    }
    // The x ticks (centred numbers under the frame): round too.
    let xs = x_ticks(&svg).expect("x ticks");
    let (x0, x1) = assert_round(&xs);
    assert!(x0 <= 0.0 && x1 >= 7.18, "{xs:?}");
}

#[test]
fn log_x_ticks_are_powers_of_two_without_decimals() {
    let c = chart(
        "log",
        true,
        vec![series("a", &[(0.5, 1.0), (4.0, 2.0), (256.0, 3.0)])],
    );
    let svg = svg(&c);
    assert_layout_ok(&svg);
    let xs = x_ticks(&svg).expect("x ticks");
    assert_eq!(
        xs,
        ["0.5", "1", "2", "4", "8", "16", "32", "64", "128", "256"]
    );
}

#[test]
fn two_quantities_get_two_panels_with_their_own_y_axes() {
    let c = two_panels();
    let svg = svg(&c);
    assert_layout_ok(&svg);
    let panels = y_ticks(&svg).expect("y ticks");
    assert_eq!(panels.len(), 2, "one panel per quantity");
    let (_, top) = assert_round(&panels[0]);
    assert!(top >= 5338.0 + 60.0 * 3.7, "{:?}", panels[0]);
    // The percentage runs 0..100 % whatever the data reach.
    assert_eq!(assert_round(&panels[1]), (0.0, 100.0));
    // Each panel labels its own y axis (rotated), the x axis once.
    let all = texts(&svg).expect("texts");
    let vertical: Vec<&str> = all
        .iter()
        .filter(|t| t.vertical)
        .map(|t| t.body.as_str())
        .collect();
    assert_eq!(vertical, ["IOPS", "new hot set on the SSD (%)"]);
    assert_eq!(all.iter().filter(|t| t.body == "seconds").count(), 1);
    let mut xs: Vec<&str> = all
        .iter()
        .filter(|t| t.anchor == "middle" && label_value(&t.body).is_some())
        .map(|t| t.body.as_str())
        .collect();
    let n = xs.len();
    xs.dedup();
    assert_eq!(
        xs.len(),
        n,
        "x tick labels drawn once, under the last panel"
    );
    assert_eq!(xs.last(), Some(&"60"));
}

#[test]
fn text_is_escaped() {
    let c = chart("a < b & c", false, vec![series("\"x\" > y", &[(1.0, 1.0)])]);
    let svg = svg(&c);
    assert!(svg.contains("a &lt; b &amp; c"));
    assert!(svg.contains("&quot;x&quot; &gt; y"));
}

#[test]
fn named_x_values_replace_their_numeric_tick() {
    let pts: Vec<(f64, f64)> = [20.0, 40.0, 60.0, 80.0, 100.0, 120.0]
        .iter()
        .map(|x| (*x, 1000.0))
        .collect();
    let mut c = chart("fill", false, vec![series("hybrid", &pts)]);
    c.x_names.push((120.0, "after TRIM".into()));
    let svg = svg(&c);
    let all = assert_layout_ok(&svg);
    assert!(all.iter().any(|t| t.body == "after TRIM"));
    assert_eq!(
        x_ticks(&svg).expect("x ticks"),
        ["0", "20", "40", "60", "80", "100"]
    );
}

#[test]
fn whole_number_x_values_get_whole_number_ticks() {
    let pts: Vec<(f64, f64)> = (1..=4).map(|n| (f64::from(n), 100.0)).collect();
    let svg = svg(&chart("streams", false, vec![series("hybrid", &pts)]));
    assert_layout_ok(&svg);
    assert_eq!(x_ticks(&svg).expect("x ticks"), ["0", "1", "2", "3", "4"]);
}
