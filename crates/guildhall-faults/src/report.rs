//! What a replay writes: `summary.json` (every acceptance criterion with
//! its bound, its measured value and pass or fail) and `report.html` (one
//! self-contained page: the incident, what was injected when, and the
//! charts of the series that tell the story). Pure: a [`Run`] in, text
//! out; the runner gathers the run.
//!
//! Charts are drawn by `plotters` into inline SVG (no script, no external
//! file), with the phases and the injected faults as vertical lines.

use crate::catalog::{Scale, Scenario};
use plotters::prelude::*;
use serde::Serialize;
use std::fmt::Write as _;

/// A moment of the run: a phase's start or an injected fault.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Mark {
    /// Since the run's start.
    pub at_ms: u64,
    /// What happened.
    pub label: String,
}

/// One line of a chart.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Series {
    /// Its name in the legend (a process, a direction).
    pub label: String,
    /// (ms since the run's start, value), in time order.
    pub points: Vec<(u64, f64)>,
}

/// One chart of the report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Chart {
    /// What it shows.
    pub title: String,
    /// The unit of its values.
    pub unit: String,
    /// Its lines.
    pub series: Vec<Series>,
}

/// One acceptance criterion, judged.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Criterion {
    /// What is asserted.
    pub name: String,
    /// The bound, as text (`≤ 7.6 s`).
    pub bound: String,
    /// What was measured.
    pub measured: f64,
    /// Its unit.
    pub unit: String,
    /// Whether it held.
    pub pass: bool,
}

/// A whole replay, as the report tells it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Run {
    /// Which incident.
    pub scenario: Scenario,
    /// At which scale.
    pub scale: Scale,
    /// The seed of its random choices (which node, when).
    pub seed: u64,
    /// `guildhall` (today's limits) or `as-it-was`.
    pub configuration: String,
    /// The command that runs it again.
    pub command: String,
    /// From the start of the baseline to the end of recovery.
    pub duration_ms: u64,
    /// The four phases' starts.
    pub phases: Vec<Mark>,
    /// What was injected or changed, when.
    pub events: Vec<Mark>,
    /// Headline figures (name, value with its unit).
    pub figures: Vec<(String, String)>,
    /// The criteria.
    pub criteria: Vec<Criterion>,
    /// The charts.
    #[serde(skip)]
    pub charts: Vec<Chart>,
    /// What was scaled down from the incident, and why.
    pub scaled_down: String,
}

impl Run {
    /// Whether every criterion held.
    pub fn passed(&self) -> bool {
        self.criteria.iter().all(|c| c.pass)
    }
}

/// `summary.json`: the run without its series.
pub fn summary_json(run: &Run) -> String {
    let mut value = serde_json::to_value(run).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        map.insert("passed".to_owned(), run.passed().into());
        map.insert("incident".to_owned(), run.scenario.incident().into());
        map.insert("seed_report".to_owned(), run.scenario.seed_report().into());
    }
    serde_json::to_string_pretty(&value).unwrap_or_default()
}

/// Events per second from the times they happened, in buckets of
/// `bucket_ms` from 0 to `end_ms` (every bucket present, zeros included).
pub fn rate_per_s(times_ms: &[u64], bucket_ms: u64, end_ms: u64) -> Vec<(u64, f64)> {
    let bucket_ms = bucket_ms.max(1);
    let buckets = usize::try_from(end_ms / bucket_ms + 1).unwrap_or(usize::MAX);
    let mut counts = vec![0u64; buckets];
    for &t in times_ms {
        if let Some(c) = usize::try_from(t / bucket_ms)
            .ok()
            .and_then(|i| counts.get_mut(i))
        {
            *c += 1;
        }
    }
    counts
        .into_iter()
        .enumerate()
        .map(|(i, c)| (i as u64 * bucket_ms, c as f64 * 1_000.0 / bucket_ms as f64))
        .collect()
}

/// The `p`th percentile (0-100) of the values in each bucket of
/// `bucket_ms` (buckets without values are left out).
pub fn percentile_per_bucket(samples: &[(u64, f64)], bucket_ms: u64, p: f64) -> Vec<(u64, f64)> {
    let bucket_ms = bucket_ms.max(1);
    let mut buckets: std::collections::BTreeMap<u64, Vec<f64>> = Default::default();
    for &(t, v) in samples {
        buckets.entry(t / bucket_ms).or_default().push(v);
    }
    buckets
        .into_iter()
        .map(|(b, mut values)| {
            values.sort_by(f64::total_cmp);
            let rank = ((p / 100.0) * (values.len() - 1) as f64).round() as usize;
            (b * bucket_ms, values[rank.min(values.len() - 1)])
        })
        .collect()
}

/// Per-second rates from samples of a counter that only grows (a restart
/// that resets it gives no negative rate: that interval is left out).
pub fn counter_rate(points: &[(u64, f64)]) -> Vec<(u64, f64)> {
    points
        .windows(2)
        .filter_map(|w| {
            let ((t0, v0), (t1, v1)) = (w[0], w[1]);
            (t1 > t0 && v1 >= v0).then(|| (t1, (v1 - v0) * 1_000.0 / (t1 - t0) as f64))
        })
        .collect()
}

/// Chart size in SVG pixels.
const CHART_SIZE_PX: (u32, u32) = (900, 300);

/// One chart as an SVG document.
fn svg(chart: &Chart, run: &Run) -> String {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, CHART_SIZE_PX).into_drawing_area();
        // Drawing into a string cannot fail for I/O; a chart that plotters
        // refuses (no room for its labels) is left out rather than failing
        // the report.
        let _ = draw(&root, chart, run);
        let _ = root.present();
    }
    text
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    chart: &Chart,
    run: &Run,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let x_end_s = (run.duration_ms as f64 / 1_000.0).max(1.0);
    let y_max = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let y_end = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
    let mut ctx = ChartBuilder::on(root)
        .caption(
            format!("{} ({})", chart.title, chart.unit),
            ("sans-serif", 16),
        )
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..x_end_s, 0.0..y_end)?;
    ctx.configure_mesh()
        .x_desc("seconds")
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    for mark in run.phases.iter().chain(&run.events) {
        let x = mark.at_ms as f64 / 1_000.0;
        ctx.draw_series(LineSeries::new(
            [(x, 0.0), (x, y_end)],
            BLACK.mix(0.25).stroke_width(1),
        ))?;
    }
    for (i, series) in chart.series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        ctx.draw_series(LineSeries::new(
            series.points.iter().map(|&(t, v)| (t as f64 / 1_000.0, v)),
            color.stroke_width(2),
        ))?
        .label(series.label.clone())
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
    }
    if !chart.series.is_empty() {
        ctx.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK.mix(0.3))
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
    }
    Ok(())
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn seconds(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1_000.0)
}

/// `report.html`: one page, nothing loaded from elsewhere.
pub fn html(run: &Run) -> String {
    let mut page = String::new();
    let verdict = if run.passed() { "passed" } else { "FAILED" };
    let _ = write!(
        page,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>guildhall chaos: {name} ({config}, {scale})</title>\
         <style>body{{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222}}\
         table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}}\
         .pass{{color:#176317}}.fail{{color:#b00020;font-weight:bold}}svg{{display:block;margin:1em 0}}</style>\
         </head><body>\n<h1>{name}: {verdict}</h1>\n\
         <p><b>Incident (report {seed_report}).</b> {incident}</p>\n\
         <p><b>What survives it here.</b> {mechanism}</p>\n\
         <p><b>This run.</b> Configuration <code>{config}</code>, scale <code>{scale}</code>, \
         seed {seed}, {duration}. Again: <code>{command}</code></p>\n\
         <p><b>Scaled down.</b> {scaled}</p>\n",
        name = run.scenario.name(),
        config = escape(&run.configuration),
        scale = run.scale.name(),
        seed_report = run.scenario.seed_report(),
        incident = escape(run.scenario.incident()),
        mechanism = escape(run.scenario.mechanism()),
        seed = run.seed,
        duration = seconds(run.duration_ms),
        command = escape(&run.command),
        scaled = escape(&run.scaled_down),
    );
    page.push_str("<h2>Acceptance criteria</h2>\n<table><tr><th>criterion</th><th>bound</th><th>measured</th><th></th></tr>\n");
    for c in &run.criteria {
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{} {}</td><td class=\"{}\">{}</td></tr>",
            escape(&c.name),
            escape(&c.bound),
            c.measured,
            escape(&c.unit),
            if c.pass { "pass" } else { "fail" },
            if c.pass { "pass" } else { "FAIL" },
        );
    }
    page.push_str("</table>\n<h2>Figures</h2>\n<table>\n");
    for (name, value) in &run.figures {
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td></tr>",
            escape(name),
            escape(value)
        );
    }
    page.push_str("</table>\n<h2>Timeline</h2>\n<table><tr><th>at</th><th>what</th></tr>\n");
    let mut marks: Vec<&Mark> = run.phases.iter().chain(&run.events).collect();
    marks.sort_by_key(|m| m.at_ms);
    for mark in marks {
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{}</td></tr>",
            seconds(mark.at_ms),
            escape(&mark.label)
        );
    }
    page.push_str("</table>\n<h2>Charts</h2>\n<p>Grey lines: the phases and the injected faults, as in the timeline.</p>\n");
    for chart in &run.charts {
        page.push_str(&svg(chart, run));
        page.push('\n');
    }
    page.push_str("</body></html>\n");
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> Run {
        Run {
            scenario: Scenario::GuildsNodeLoss,
            scale: Scale::Small,
            seed: 7,
            configuration: "guildhall".to_owned(),
            command: "guildhall chaos run guilds-node-loss --seed 7".to_owned(),
            duration_ms: 10_000,
            phases: vec![Mark {
                at_ms: 0,
                label: "baseline".to_owned(),
            }],
            events: vec![Mark {
                at_ms: 4_000,
                label: "kill -9 guilds-2 <pid 12>".to_owned(),
            }],
            figures: vec![("posts acknowledged".to_owned(), "120".to_owned())],
            criteria: vec![Criterion {
                name: "recovery".to_owned(),
                bound: "≤ 7.6 s".to_owned(),
                measured: 3.2,
                unit: "s".to_owned(),
                pass: true,
            }],
            charts: vec![Chart {
                title: "Posts acknowledged".to_owned(),
                unit: "per s".to_owned(),
                series: vec![Series {
                    label: "all guilds".to_owned(),
                    points: vec![(0, 1.0), (1_000, 3.0), (2_000, 0.0)],
                }],
            }],
            scaled_down: "a little".to_owned(),
        }
    }

    #[test]
    fn the_page_holds_its_charts_and_escapes_what_it_quotes() {
        let page = html(&run());
        assert!(page.contains("<svg"), "a chart is drawn inline");
        assert!(page.contains("Posts acknowledged"));
        assert!(page.contains("&lt;pid 12&gt;"), "text is escaped");
        assert!(!page.contains("<script"), "nothing runs or loads");
        assert!(page.contains("guilds-node-loss: passed"));
    }

    #[test]
    fn the_summary_carries_every_criterion_and_the_verdict() {
        let mut failing = run();
        failing.criteria[0].pass = false;
        let summary: serde_json::Value =
            serde_json::from_str(&summary_json(&failing)).unwrap_or_default();
        assert_eq!(summary["passed"], false);
        assert_eq!(summary["scenario"], "guilds-node-loss");
        assert_eq!(summary["criteria"][0]["measured"], 3.2);
        assert_eq!(summary["seed_report"], "000");
        assert!(summary.get("charts").is_none());
    }

    #[test]
    fn rates_and_percentiles_are_per_bucket() {
        assert_eq!(
            rate_per_s(&[0, 100, 900, 1_500], 1_000, 2_500),
            vec![(0, 3.0), (1_000, 1.0), (2_000, 0.0)]
        );
        let samples = [(0, 1.0), (10, 3.0), (20, 2.0), (1_200, 9.0)];
        assert_eq!(
            percentile_per_bucket(&samples, 1_000, 50.0),
            vec![(0, 2.0), (1_000, 9.0)]
        );
        // A counter that restarted gives no rate for that interval.
        assert_eq!(
            counter_rate(&[(0, 0.0), (500, 10.0), (1_000, 2.0), (2_000, 4.0)]),
            vec![(500, 20.0), (2_000, 2.0)]
        );
    }
}
