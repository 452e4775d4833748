//! `lardon report --html FILE`: one self-contained page (no script, no
//! network at view time) with the table and four charts drawn by
//! `plotters`' SVG backend and inlined: declared vs measured peak per key,
//! the timeline of what ran (one bar per task, coloured by state), the
//! memory held over time against the budget, and the waits by reason.

use std::fmt::Write as _;

use anyhow::{Result, anyhow};
use lardon::format_bytes;
use lardon_daemon::spec::TaskState;
use plotters::prelude::*;

use super::{Report, held_over_time, table};

/// Chart width, pixels.
const WIDTH: u32 = 960;
/// A timeline row, pixels.
const ROW: u32 = 14;
/// Most tasks drawn on the timeline (the latest to start).
const MAX_BARS: usize = 400;

/// The page.
///
/// # Errors
/// A chart that could not be drawn.
pub(crate) fn page(r: &Report) -> Result<String> {
    let mut out = String::from(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>lardon report</title>\n<style>\n\
         body { font-family: sans-serif; margin: 2em; color: #222; }\n\
         table { border-collapse: collapse; font-size: 13px; }\n\
         th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: right; }\n\
         th:first-child, td:first-child { text-align: left; }\n\
         tr.total td { font-weight: bold; }\n\
         figure { margin: 1.5em 0; }\n\
         </style>\n</head>\n<body>\n<h1>lardon report</h1>\n",
    );
    let budget = r.memory_budget.map_or_else(|| "unknown".to_owned(), format_bytes);
    let since = r.since_ms.map_or_else(|| "the start".to_owned(), utc);
    let _ = writeln!(
        out,
        "<p>Generated {}; tasks not ended before {}; memory budget {}.</p>",
        escape(&utc(r.generated_ms)),
        escape(&since),
        escape(&budget)
    );
    out.push_str("<h2>Per learning key</h2>\n");
    out.push_str(&html_table(r));
    for (title, svg) in [
        ("Declared memory vs measured peak (max per key)", declared_vs_peak(r)?),
        ("What ran: one bar per task, coloured by state", timeline(r)?),
        ("Memory held over time against the budget", memory_held(r)?),
        ("Time waiting by reason (all tasks)", waits(r)?),
    ] {
        let _ =
            writeln!(out, "<figure>\n<figcaption><h2>{}</h2></figcaption>\n{svg}\n</figure>", escape(title));
    }
    out.push_str("</body>\n</html>\n");
    Ok(out)
}

/// `&`, `<`, `>` and `"` escaped for HTML text and attributes.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// `2026-03-01 14:05:09 UTC`.
pub(crate) fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = crate::parse::civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}

fn html_table(r: &Report) -> String {
    // The text table's rows, as cells: one source of the figures.
    let text = table::render(r);
    let mut out = String::from("<table>\n");
    let body: Vec<&str> = text.lines().take_while(|l| !l.is_empty()).collect();
    for (i, line) in body.iter().enumerate() {
        let cells: Vec<&str> = line.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
        let (tag, class) = match i {
            0 => ("th", ""),
            _ if i + 1 == body.len() => ("td", " class=\"total\""),
            _ => ("td", ""),
        };
        let _ = write!(out, "<tr{class}>");
        for c in cells {
            let _ = write!(out, "<{tag}>{}</{tag}>", escape(c));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    for line in text.lines().skip(body.len()) {
        if line.ends_with(':') {
            let _ = writeln!(out, "<h3>{}</h3>", escape(line.trim_end_matches(':')));
        } else if !line.is_empty() {
            let _ = writeln!(out, "<div>{}</div>", escape(line.trim()));
        }
    }
    out
}

fn state_colour(state: TaskState) -> RGBColor {
    match state {
        TaskState::Completed => RGBColor(46, 139, 87),
        TaskState::Failed => RGBColor(200, 40, 40),
        TaskState::Cancelled => RGBColor(140, 140, 140),
        TaskState::Running => RGBColor(40, 100, 200),
        TaskState::Pending | TaskState::Paused => RGBColor(230, 150, 30),
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

fn drawn<T, E: std::fmt::Display>(what: &str, r: std::result::Result<T, E>) -> Result<T> {
    r.map_err(|e| anyhow!("drawing the {what} chart: {e}"))
}

/// Two bars per key: declared (max) and measured peak (max), MiB.
fn declared_vs_peak(r: &Report) -> Result<String> {
    let names: Vec<String> = r.classes.iter().map(|c| short(&c.key)).collect();
    let declared = r.classes.iter().map(|c| c.figures.declared.map(|s| mib(s.max))).collect();
    let peak = r.classes.iter().map(|c| c.figures.peak.map(|s| mib(s.max))).collect();
    bars(
        &Bars { what: "declared vs peak", height: 360, names, y_desc: "MiB", floor: 1.0 },
        vec![
            Series {
                label: Some("declared"),
                colour: RGBColor(120, 150, 200),
                span: (-0.4, -0.02),
                values: declared,
            },
            Series {
                label: Some("measured peak"),
                colour: RGBColor(220, 120, 40),
                span: (0.02, 0.4),
                values: peak,
            },
        ],
    )
}

/// A bar chart: one category per name, one bar per series in each.
struct Bars {
    what: &'static str,
    height: u32,
    names: Vec<String>,
    y_desc: &'static str,
    /// The least top of the y axis.
    floor: f64,
}

/// One series of a [`Bars`] chart: its bars' colour, where in its
/// category each stands (offsets from the category's centre), the values
/// (`None`: no bar) and its legend label, if any.
struct Series {
    label: Option<&'static str>,
    colour: RGBColor,
    span: (f64, f64),
    values: Vec<Option<f64>>,
}

fn bars(chart_of: &Bars, series: Vec<Series>) -> Result<String> {
    let what = chart_of.what;
    let n = chart_of.names.len().max(1);
    let top =
        series.iter().flat_map(|s| s.values.iter().flatten()).fold(chart_of.floor, |a, b| a.max(*b)) * 1.15;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, chart_of.height)).into_drawing_area();
        drawn(what, root.fill(&WHITE))?;
        let mut chart = drawn(
            what,
            ChartBuilder::on(&root)
                .margin(10)
                .x_label_area_size(40)
                .y_label_area_size(70)
                .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..top),
        )?;
        let names = &chart_of.names;
        drawn(
            what,
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(n)
                .x_label_formatter(&|x| category(names, *x))
                .y_desc(chart_of.y_desc)
                .draw(),
        )?;
        let mut labelled = false;
        for s in series {
            let (colour, (from, to)) = (s.colour, s.span);
            let drawn_series = drawn(
                what,
                chart.draw_series(s.values.iter().enumerate().filter_map(|(i, v)| {
                    let x = i as f64;
                    v.map(|v| Rectangle::new([(x + from, 0.0), (x + to, v)], colour.filled()))
                })),
            )?;
            if let Some(label) = s.label {
                labelled = true;
                drawn_series
                    .label(label)
                    .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled()));
            }
        }
        if labelled {
            legend(what, &mut chart)?;
        }
        drawn(what, root.present())?;
    }
    Ok(svg)
}

/// Draws the chart's legend (its series' labels) in the house style.
fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    what: &str,
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<()> {
    drawn(what, chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw())
}

/// The label of the category at `x` (the ticks fall on whole numbers).
fn category(names: &[String], x: f64) -> String {
    let i = x.round();
    if (x - i).abs() > 1e-6 || i < 0.0 {
        return String::new();
    }
    names.get(i as usize).cloned().unwrap_or_default()
}

/// A key short enough to label a bar.
fn short(key: &str) -> String {
    if key.chars().count() <= 28 {
        key.to_owned()
    } else {
        format!("{}…", key.chars().take(27).collect::<String>())
    }
}

/// The span of the timeline, Unix ms (at least one second).
fn span(r: &Report) -> (i64, i64) {
    let start = r.timeline.iter().map(|b| b.start_ms).min().unwrap_or(r.generated_ms);
    let end = r.timeline.iter().map(|b| b.end_ms).max().unwrap_or(start).max(start + 1000);
    (start, end)
}

/// One bar per task (x: seconds from the first start), the newest on top.
fn timeline(r: &Report) -> Result<String> {
    const WHAT: &str = "timeline";
    let (t0, t1) = span(r);
    let secs = |t: i64| (t - t0) as f64 / 1000.0;
    let skip = r.timeline.len().saturating_sub(MAX_BARS);
    let bars = &r.timeline[skip..];
    // A bar of a task that ended at once is still seen.
    let least = secs(t1) * 0.004;
    let rows = bars.len().max(1);
    let height = 80 + ROW * u32::try_from(rows).unwrap_or(u32::MAX / ROW);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        drawn(WHAT, root.fill(&WHITE))?;
        let mut chart = drawn(
            WHAT,
            ChartBuilder::on(&root)
                .margin(10)
                .x_label_area_size(35)
                .y_label_area_size(70)
                .build_cartesian_2d(0f64..secs(t1), 0f64..rows as f64),
        )?;
        drawn(
            WHAT,
            chart
                .configure_mesh()
                .disable_y_mesh()
                .y_labels(rows.min(20))
                .y_label_formatter(&|y| {
                    bars.get(y.floor().max(0.0) as usize)
                        .map_or_else(String::new, |b| format!("task {}", b.id))
                })
                .x_desc("seconds from the first start")
                .draw(),
        )?;
        drawn(
            WHAT,
            chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
                let y = i as f64;
                Rectangle::new(
                    [(secs(b.start_ms), y + 0.15), (secs(b.end_ms).max(secs(b.start_ms) + least), y + 0.85)],
                    state_colour(b.state).filled(),
                )
            })),
        )?;
        for state in [TaskState::Completed, TaskState::Failed, TaskState::Cancelled, TaskState::Running] {
            if bars.iter().any(|b| b.state == state) {
                let c = state_colour(state);
                drawn(WHAT, chart.draw_series(std::iter::empty::<Rectangle<(f64, f64)>>()))?
                    .label(state.as_str())
                    .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], c.filled()));
            }
        }
        legend(WHAT, &mut chart)?;
        drawn(WHAT, root.present())?;
    }
    Ok(svg)
}

/// The memory the running tasks held (their grants), and the budget.
fn memory_held(r: &Report) -> Result<String> {
    const WHAT: &str = "memory held";
    let (t0, t1) = span(r);
    let secs = |t: i64| (t - t0) as f64 / 1000.0;
    let steps = held_over_time(&r.timeline);
    let peak = steps.iter().map(|(_, b)| mib(*b)).fold(1.0, f64::max);
    let budget = r.memory_budget.map(mib);
    let top = budget.unwrap_or(0.0).max(peak) * 1.15;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, 320)).into_drawing_area();
        drawn(WHAT, root.fill(&WHITE))?;
        let mut chart = drawn(
            WHAT,
            ChartBuilder::on(&root)
                .margin(10)
                .x_label_area_size(35)
                .y_label_area_size(70)
                .build_cartesian_2d(0f64..secs(t1), 0f64..top),
        )?;
        drawn(WHAT, chart.configure_mesh().x_desc("seconds from the first start").y_desc("MiB").draw())?;
        // A step line: each level holds until the next change.
        let mut points = vec![(0.0, 0.0)];
        let mut level = 0.0;
        for (t, bytes) in &steps {
            points.push((secs(*t), level));
            level = mib(*bytes);
            points.push((secs(*t), level));
        }
        points.push((secs(t1), level));
        let held = RGBColor(40, 100, 200);
        drawn(WHAT, chart.draw_series(LineSeries::new(points, held.stroke_width(2))))?
            .label("held by running tasks (their grants)")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], held.stroke_width(2)));
        if let Some(b) = budget {
            drawn(
                WHAT,
                chart.draw_series(LineSeries::new(vec![(0.0, b), (secs(t1), b)], RED.stroke_width(1))),
            )?
            .label("memory budget")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 12, y)], RED));
        }
        legend(WHAT, &mut chart)?;
        drawn(WHAT, root.present())?;
    }
    Ok(svg)
}

/// One bar per wait reason, seconds.
fn waits(r: &Report) -> Result<String> {
    let names = r.totals.waits_ms.keys().cloned().collect();
    let seconds = r.totals.waits_ms.values().map(|ms| Some(*ms as f64 / 1000.0)).collect();
    bars(
        &Bars { what: "waits", height: 300, names, y_desc: "seconds", floor: 0.1 },
        vec![Series { label: None, colour: RGBColor(230, 150, 30), span: (-0.3, 0.3), values: seconds }],
    )
}
