//! Reads a chart's SVG (as [`super::svg`] writes it) back and checks its
//! layout: every `<text>`'s estimated extent inside the canvas, and each
//! panel's y ticks round (evenly spaced 1, 2 or 5 × 10^k apart, with no more
//! decimals than the step has). The tests run it on every chart the bench
//! makes; it is public so that a caller can check a chart too.

use super::svg::text_width;

/// A `<text>` read back from the SVG.
#[derive(Debug, Clone, PartialEq)]
pub struct Text {
    /// Anchor point.
    pub x: f64,
    /// Baseline.
    pub y: f64,
    /// Font size.
    pub size: f64,
    /// `start`, `middle` or `end`.
    pub anchor: String,
    /// Rotated by -90° about (x, y) (a y axis label).
    pub vertical: bool,
    /// The text, unescaped.
    pub body: String,
}

impl Text {
    /// (x0, y0, x1, y1) the text covers, by the layout's own width estimate
    /// (an ascent of 0.8 and a descent of 0.25 of the font size).
    pub fn extent(&self) -> (f64, f64, f64, f64) {
        let len = text_width(&self.body, self.size);
        let (a, b) = match self.anchor.as_str() {
            "middle" => (-len / 2.0, len / 2.0),
            "end" => (-len, 0.0),
            _ => (0.0, len),
        };
        let (asc, desc) = (0.8 * self.size, 0.25 * self.size);
        if self.vertical {
            // The run goes up from (x, y), the ascent to the left.
            (self.x - asc, self.y - b, self.x + desc, self.y - a)
        } else {
            (self.x + a, self.y - asc, self.x + b, self.y + desc)
        }
    }
}

fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let i = tag.find(&key)? + key.len();
    let len = tag[i..].find('"')?;
    Some(&tag[i..i + len])
}

fn num(tag: &str, name: &str) -> Option<f64> {
    attr(tag, name)?.parse().ok()
}

fn unesc(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}

/// The `<text>` elements of `svg`, or a description of the first one that
/// does not parse.
pub fn texts(svg: &str) -> Result<Vec<Text>, String> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(i) = rest.find("<text ") {
        rest = &rest[i..];
        let bad = || format!("unreadable text element: {}", &rest[..rest.len().min(80)]);
        let open = rest.find('>').ok_or_else(bad)?;
        let close = rest.find("</text>").ok_or_else(bad)?;
        let tag = &rest[..open];
        out.push(Text {
            x: num(tag, "x").ok_or_else(bad)?,
            y: num(tag, "y").ok_or_else(bad)?,
            size: num(tag, "font-size").ok_or_else(bad)?,
            anchor: attr(tag, "text-anchor").unwrap_or("start").to_string(),
            vertical: attr(tag, "transform").is_some_and(|t| t.starts_with("rotate(-90")),
            body: unesc(rest.get(open + 1..close).ok_or_else(bad)?),
        });
        rest = &rest[close..];
    }
    Ok(out)
}

/// The canvas's (width, height).
pub fn canvas(svg: &str) -> Option<(f64, f64)> {
    let start = svg.find("<svg ")?;
    let tag = &svg[start..start + svg[start..].find('>')?];
    Some((num(tag, "width")?, num(tag, "height")?))
}

/// A tick label's value (`2000`, `0.5`, `40k`, `2M`).
pub fn label_value(l: &str) -> Option<f64> {
    let (n, mul) = if let Some(n) = l.strip_suffix('k') {
        (n, 1e3)
    } else if let Some(n) = l.strip_suffix('M') {
        (n, 1e6)
    } else {
        (l, 1.0)
    };
    n.parse::<f64>().ok().map(|v| v * mul)
}

/// Each panel's y tick labels, top panel first (the texts anchored at their
/// end inside each `<g class="panel">`).
pub fn y_ticks(svg: &str) -> Result<Vec<Vec<String>>, String> {
    svg.split(r#"<g class="panel""#)
        .skip(1)
        .map(|g| {
            let end = g.find("</g>").ok_or("a panel group is not closed")?;
            Ok(texts(&g[..end])?
                .into_iter()
                .filter(|t| t.anchor == "end")
                .map(|t| t.body)
                .collect())
        })
        .collect()
}

/// The x tick labels: the numbers centred under the last frame.
pub fn x_ticks(svg: &str) -> Result<Vec<String>, String> {
    let tail = svg.rfind("</g>").map_or(svg, |i| &svg[i..]);
    Ok(texts(tail)?
        .into_iter()
        .filter(|t| t.anchor == "middle" && label_value(&t.body).is_some())
        .map(|t| t.body)
        .collect())
}

/// Whether `labels` are round ticks: numbers evenly spaced 1, 2 or 5 ×
/// 10^k apart, each a multiple of the step, written with as many decimals
/// as the step has (0 written as `0`). Returns the (first, last) value.
pub fn round_ticks(labels: &[String]) -> Result<(f64, f64), String> {
    let v = labels
        .iter()
        .map(|l| label_value(l).ok_or_else(|| format!("tick {l:?} is not a number")))
        .collect::<Result<Vec<f64>, String>>()?;
    if v.len() < 2 {
        return Err(format!("fewer than two ticks: {labels:?}"));
    }
    let step = v[1] - v[0];
    if step.is_nan() || step <= 0.0 {
        return Err(format!("ticks not increasing: {labels:?}"));
    }
    let m = step / 10f64.powf(step.log10().floor());
    if ![1.0, 2.0, 5.0, 10.0].iter().any(|k| (m - k).abs() < 1e-6) {
        return Err(format!("step {step} of {labels:?} is not 1, 2 or 5 x 10^k"));
    }
    for (i, x) in v.iter().enumerate() {
        let want = v[0] + step * i as f64;
        if (x - want).abs() > step * 1e-6 || ((x / step).round() - x / step).abs() > 1e-6 {
            return Err(format!(
                "{labels:?} are not multiples of {step} evenly spaced"
            ));
        }
    }
    for l in labels {
        let div = if l.ends_with('M') {
            1e6
        } else if l.ends_with('k') {
            1e3
        } else {
            1.0
        };
        let s = step / div;
        let need = if s >= 1.0 {
            0
        } else {
            (-s.log10() - 1e-9).ceil() as usize
        };
        let have = l
            .trim_end_matches(['k', 'M'])
            .split_once('.')
            .map_or(0, |(_, d)| d.len());
        if have != need && !(l == "0" && have == 0) {
            return Err(format!(
                "{l} in {labels:?}: {have} decimals for a step of {step}"
            ));
        }
    }
    Ok((v[0], v[v.len() - 1]))
}

/// What is wrong with a chart's layout: texts (partly) outside the canvas,
/// panels whose y ticks are not round. Empty if nothing.
pub fn layout_problems(svg: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Some((w, h)) = canvas(svg) else {
        return vec!["no <svg> element with a width and height".into()];
    };
    match texts(svg) {
        Err(e) => out.push(e),
        Ok(all) => {
            for t in &all {
                let (x0, y0, x1, y1) = t.extent();
                if x0 < 0.0 || y0 < 0.0 || x1 > w || y1 > h {
                    out.push(format!(
                        "{:?} covers ({x0:.0},{y0:.0})..({x1:.0},{y1:.0}), outside the {w}x{h} canvas",
                        t.body
                    ));
                }
            }
        }
    }
    match y_ticks(svg) {
        Err(e) => out.push(e),
        Ok(panels) if panels.is_empty() => out.push("no panel".into()),
        Ok(panels) => {
            for (i, p) in panels.iter().enumerate() {
                if let Err(e) = round_ticks(p) {
                    out.push(format!("panel {}: {e}", i + 1));
                }
            }
        }
    }
    match x_ticks(svg) {
        Err(e) => out.push(e),
        Ok(xs) => {
            let powers_of_two = xs.len() >= 2
                && xs.iter().all(|l| {
                    label_value(l).is_some_and(|v| v > 0.0 && v.log2().fract().abs() < 1e-9)
                });
            if !powers_of_two {
                if let Err(e) = round_ticks(&xs) {
                    out.push(format!("x axis: {e}"));
                }
            }
        }
    }
    out
}
