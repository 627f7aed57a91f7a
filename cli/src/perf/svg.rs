//! The sweep as an SVG chart: bus bandwidth and latency against size, log axes, one line per
//! series (a layer and a collective), labelled. Written by hand: two panels of polylines need
//! no crate.

use crate::ops::human;
use std::fmt::Write;

const W: f64 = 520.0;
const H: f64 = 360.0;
const PAD: f64 = 60.0;
const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

/// One line of the chart.
pub struct Series {
    /// The layer, as reports name it.
    pub layer: &'static str,
    /// The collective, as reports name it.
    pub coll: &'static str,
    /// (bytes, busbw in GB/s, time in µs) by size.
    pub points: Vec<(f64, f64, f64)>,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Both panels for `series`; `title` heads the chart.
pub fn chart(series: &[Series], title: &str) -> String {
    let all: Vec<&(f64, f64, f64)> = series.iter().flat_map(|s| s.points.iter()).collect();
    let range = |f: &dyn Fn(&(f64, f64, f64)) -> f64| {
        let v: Vec<f64> = all
            .iter()
            .map(|p| f(p))
            .filter(|x| *x > 0.0 && x.is_finite())
            .collect();
        let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = v.iter().cloned().fold(0.0, f64::max);
        if v.is_empty() {
            (1.0, 10.0)
        } else {
            (
                lo.log10().floor(),
                hi.log10().ceil().max(lo.log10().floor() + 1.0),
            )
        }
    };
    let xr = range(&|p| p.0);
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="11">
<title>{}</title>
<text x="{}" y="18" text-anchor="middle" font-size="14">{}</text>
"##,
        2.0 * W,
        H + 30.0,
        esc(title),
        W,
        esc(title)
    );
    for (panel, (name, unit)) in [("busbw", "GB/s"), ("latency", "us")].iter().enumerate() {
        let pick = |p: &(f64, f64, f64)| if panel == 0 { p.1 } else { p.2 };
        let yr = range(&pick);
        let x0 = panel as f64 * W;
        let sx = |x: f64| x0 + PAD + (x.log10() - xr.0) / (xr.1 - xr.0) * (W - 2.0 * PAD);
        let sy = |y: f64| {
            30.0 + H - PAD - (y.max(1e-12).log10() - yr.0) / (yr.1 - yr.0) * (H - 2.0 * PAD)
        };
        let _ = writeln!(
            s,
            r##"<g class="panel" data-panel="{name}"><rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#888"/>"##,
            x0 + PAD,
            30.0 + PAD,
            W - 2.0 * PAD,
            H - 2.0 * PAD
        );
        for e in (xr.0 as i32)..=(xr.1 as i32) {
            let x = sx(10f64.powi(e));
            let _ = writeln!(
                s,
                r##"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                30.0 + H - PAD + 14.0,
                esc(&human(10f64.powi(e) as usize))
            );
        }
        for e in (yr.0 as i32)..=(yr.1 as i32) {
            let y = sy(10f64.powi(e));
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{y:.1}" text-anchor="end">1e{e}</text>"##,
                x0 + PAD - 4.0
            );
        }
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">size (bytes, log)</text>"##,
            x0 + W / 2.0,
            30.0 + H - 18.0
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" transform="rotate(-90 {:.1} {:.1})">{name} ({unit}, log)</text>"##,
            x0 + 16.0,
            30.0 + H / 2.0,
            x0 + 16.0,
            30.0 + H / 2.0
        );
        for (
            i,
            Series {
                layer,
                coll,
                points: pts,
            },
        ) in series.iter().enumerate()
        {
            let color = COLORS[i % COLORS.len()];
            let points: Vec<String> = pts
                .iter()
                .filter(|p| pick(p) > 0.0)
                .map(|p| format!("{:.1},{:.1}", sx(p.0), sy(pick(p))))
                .collect();
            let _ = writeln!(
                s,
                r##"<polyline class="series" data-layer="{layer}" data-collective="{coll}" fill="none" stroke="{color}" stroke-width="1.5" points="{}"/>"##,
                points.join(" ")
            );
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" fill="{color}">{coll} {layer}</text>"##,
                x0 + PAD + 6.0,
                30.0 + PAD + 14.0 * (i as f64 + 1.0)
            );
        }
        s += "</g>\n";
    }
    s += "</svg>\n";
    s
}
