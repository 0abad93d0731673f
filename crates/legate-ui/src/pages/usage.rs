//! The Usage page: tokens by agent, model and day, as a chart drawn server-side and as tables.
//!
//! This module owns grouping the engine's usage report (`Engine::usage` → [`UsageReport`],
//! one line per task) by day, agent and model, and rendering it: an inline SVG with one bar per
//! day, stacked by agent (with a `<title>`, a `<desc>` and a legend in text, so colour is never
//! the only carrier), then the same figures as tables (the accessible fallback). Agent and
//! model names come from configuration and from what an agent reported, so they are hostile
//! and are only ever placed through `maud`'s escaping, in the SVG as in the tables.
//!
//! It adds up only what the report holds: a task whose agent reported nothing counts as
//! unreported, never as 0 tokens. It never reads the store itself.

use crate::Dashboard;
use crate::pages::layout::{self, Nav};
use crate::web::{PageError, Viewer};
use axum::Extension;
use axum::extract::{Query, State};
use legate_core::Timestamp;
use legate_engine::{TaskUsage, UsageFilter, UsageReport};
use maud::{Markup, html};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The page's filters (empty fields are no filter).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct UsageQuery {
    /// Only this agent's tasks.
    pub agent: Option<String>,
    /// Only usage counted for this model.
    pub model: Option<String>,
}

/// `GET /usage[?agent=…&model=…]`.
pub async fn page(
    State(ui): State<Dashboard>,
    Extension(viewer): Extension<Viewer>,
    Query(q): Query<UsageQuery>,
) -> Result<Markup, PageError> {
    let nonempty = |v: &Option<String>| {
        v.as_ref()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    };
    let filter = UsageFilter {
        agent: nonempty(&q.agent),
        model: nonempty(&q.model),
        ..UsageFilter::default()
    };
    let engine = ui.inner.engine.clone();
    let f = filter.clone();
    // The report reads up to 100,000 stored tasks: off the async workers.
    let report = tokio::task::spawn_blocking(move || engine.records().usage(&f))
        .await
        .map_err(|_| PageError::from(legate_core::Error::internal("the usage report stopped")))??;
    let grouped = group(&report);
    Ok(layout::page(
        "Usage",
        Some(&viewer),
        Nav::Usage,
        html! {
            h1 { "Usage" }
            form.filters method="get" action="/usage" {
                label { "Agent " input type="text" name="agent" value=(filter.agent.clone().unwrap_or_default()); }
                " "
                label { "Model " input type="text" name="model" value=(filter.model.clone().unwrap_or_default()); }
                " "
                button type="submit" { "Filter" }
            }
            (render(&grouped))
        },
    ))
}

/// Days the chart shows (the most recent ones); the tables show every day.
pub const CHART_DAYS: usize = 31;
/// Agents the chart stacks by name; the rest are drawn as one "other" segment.
pub const CHART_AGENTS: usize = 8;

/// Colours of the agents' segments (distinguishable, with a legend in text; the legend's
/// swatches are the classes `sw-0`…`sw-8` of `app.css`, in the same order: the page's CSP
/// allows no inline style).
const PALETTE: [&str; CHART_AGENTS + 1] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#17becf",
];

/// Summed figures of a group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sums {
    /// Tasks in the group.
    pub tasks: u64,
    /// Tasks whose agent reported no usage.
    pub unreported: u64,
    /// Input tokens reported.
    pub input: u64,
    /// Output tokens reported.
    pub output: u64,
    /// Tokens: the reported total, else input + output.
    pub tokens: u64,
}

impl Sums {
    fn add(&mut self, t: &TaskUsage) {
        self.tasks += 1;
        self.unreported += t.totals.unreported;
        let (i, o) = (
            t.totals.input_tokens.unwrap_or(0),
            t.totals.output_tokens.unwrap_or(0),
        );
        self.input = self.input.saturating_add(i);
        self.output = self.output.saturating_add(o);
        let total = t.totals.total_tokens.unwrap_or(i.saturating_add(o));
        self.tokens = self.tokens.saturating_add(total);
    }
}

/// The report grouped for the page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grouped {
    /// By day (`YYYY-MM-DD`, UTC), then agent.
    pub by_day: BTreeMap<String, BTreeMap<String, Sums>>,
    /// By agent.
    pub by_agent: BTreeMap<String, Sums>,
    /// By model (`""`: not known).
    pub by_model: BTreeMap<String, Sums>,
    /// Everything.
    pub total: Sums,
}

/// Groups a usage report by the UTC day each task was created, its agent and its model.
pub fn group(report: &UsageReport) -> Grouped {
    let mut g = Grouped::default();
    for t in &report.by_task {
        let day = day_of(t.created_at);
        g.by_day
            .entry(day)
            .or_default()
            .entry(t.agent.clone())
            .or_default()
            .add(t);
        g.by_agent.entry(t.agent.clone()).or_default().add(t);
        g.by_model
            .entry(t.model.clone().unwrap_or_default())
            .or_default()
            .add(t);
        g.total.add(t);
    }
    g
}

/// The UTC day of a timestamp, as `YYYY-MM-DD` (proleptic Gregorian).
pub fn day_of(t: Timestamp) -> String {
    let days = t.0.div_euclid(86_400_000);
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Renders the page's body: the chart, then the tables.
pub fn render(g: &Grouped) -> Markup {
    html! {
        section.usage aria-labelledby="usage-title" {
            h2 #usage-title { "Tokens" }
            p { (g.total.tokens) " tokens over " (g.total.tasks) " tasks"
                @if g.total.unreported > 0 { " (" (g.total.unreported) " reported no usage)" } "." }
            @if g.total.tasks == 0 {
                p { "No tasks yet." }
            } @else {
                (chart(g))
                (table("Tokens by day", "Day", g.by_day.iter().map(|(d, a)| (d.clone(), a.values().fold(Sums::default(), sum)))))
                (table("Tokens by agent", "Agent", g.by_agent.iter().map(|(k, v)| (k.clone(), *v))))
                (table("Tokens by model", "Model", g.by_model.iter().map(|(k, v)| (if k.is_empty() { "(not known)".to_owned() } else { k.clone() }, *v))))
            }
        }
    }
}

fn sum(mut a: Sums, b: &Sums) -> Sums {
    a.tasks += b.tasks;
    a.unreported += b.unreported;
    a.input = a.input.saturating_add(b.input);
    a.output = a.output.saturating_add(b.output);
    a.tokens = a.tokens.saturating_add(b.tokens);
    a
}

fn table(caption: &str, key: &str, rows: impl Iterator<Item = (String, Sums)>) -> Markup {
    html! {
        table.usage-table {
            caption { (caption) }
            thead { tr { th scope="col" { (key) } th scope="col" { "Tasks" } th scope="col" { "Unreported" } th scope="col" { "Input" } th scope="col" { "Output" } th scope="col" { "Tokens" } } }
            tbody {
                @for (k, s) in rows {
                    tr { th scope="row" { (k) } td { (s.tasks) } td { (s.unreported) } td { (s.input) } td { (s.output) } td { (s.tokens) } }
                }
            }
        }
    }
}

struct Seg {
    slot: usize,
    y: u64,
    h: u64,
    tokens: u64,
}

struct Bar<'a> {
    day: &'a str,
    x: u64,
    segs: Vec<Seg>,
}

/// The chart: one bar per day (the last [`CHART_DAYS`]), stacked by agent.
fn chart(g: &Grouped) -> Markup {
    // Agents by tokens, the biggest first, the tail folded into "other".
    let mut agents: Vec<(&String, u64)> = g.by_agent.iter().map(|(k, v)| (k, v.tokens)).collect();
    agents.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let named: Vec<&String> = agents.iter().take(CHART_AGENTS).map(|a| a.0).collect();
    let slot = |agent: &String| {
        named
            .iter()
            .position(|n| *n == agent)
            .unwrap_or(CHART_AGENTS)
    };
    let days: Vec<(&String, &BTreeMap<String, Sums>)> = {
        let all: Vec<_> = g.by_day.iter().collect();
        let skip = all.len().saturating_sub(CHART_DAYS);
        all.into_iter().skip(skip).collect()
    };
    let max = days
        .iter()
        .map(|(_, a)| a.values().fold(0u64, |sum, s| sum.saturating_add(s.tokens)))
        .max()
        .unwrap_or(0)
        .max(1);
    let (w, h, left, bottom, top) = (720u64, 260u64, 70u64, 60u64, 10u64);
    let plot_h = h - bottom - top;
    let step = (w - left) / (days.len() as u64).max(1);
    let bar_w = (step * 7 / 10).max(2);
    let scale = |v: u64| -> u64 { ((u128::from(v) * u128::from(plot_h)) / u128::from(max)) as u64 };
    let bars: Vec<Bar> = days
        .iter()
        .enumerate()
        .map(|(i, (day, per_agent))| {
            let mut totals = [0u64; CHART_AGENTS + 1];
            for (a, s) in per_agent.iter() {
                totals[slot(a)] = totals[slot(a)].saturating_add(s.tokens);
            }
            let mut y = top + plot_h;
            let segs = totals
                .iter()
                .enumerate()
                .filter(|(_, v)| **v > 0)
                .map(|(k, v)| {
                    let hgt = scale(*v).max(1);
                    y = y.saturating_sub(hgt);
                    Seg {
                        slot: k,
                        y,
                        h: hgt,
                        tokens: *v,
                    }
                })
                .collect();
            Bar {
                day,
                x: left + i as u64 * step + (step - bar_w) / 2,
                segs,
            }
        })
        .collect();
    let desc = format!(
        "Bars per day for {} days, stacked by agent; the tallest day has {} tokens. The same figures are in the tables below.",
        days.len(),
        max
    );
    html! {
        figure.usage-chart {
            svg role="img" aria-labelledby="usage-svg-title usage-svg-desc" viewBox={ "0 0 " (w) " " (h) } width="100%" preserveAspectRatio="xMinYMin meet" xmlns="http://www.w3.org/2000/svg" {
                title #usage-svg-title { "Tokens by day and agent" }
                desc #usage-svg-desc { (desc) }
                line x1=(left) y1=(top + plot_h) x2=(w) y2=(top + plot_h) stroke="currentColor" {}
                text x=(left - 6) y=(top + 10) text-anchor="end" font-size="11" fill="currentColor" { (max) }
                text x=(left - 6) y=(top + plot_h) text-anchor="end" font-size="11" fill="currentColor" { "0" }
                @for bar in &bars {
                    g {
                        @for seg in &bar.segs {
                            rect x=(bar.x) y=(seg.y) width=(bar_w) height=(seg.h) fill=(PALETTE[seg.slot]) {
                                title { (bar.day) ", " (named.get(seg.slot).map_or("other", |n| n.as_str())) ": " (seg.tokens) " tokens" }
                            }
                        }
                        text x=(bar.x + bar_w / 2) y=(top + plot_h + 14) text-anchor="end" font-size="10" fill="currentColor"
                            transform={ "rotate(-45 " (bar.x + bar_w / 2) " " (top + plot_h + 14) ")" } { (bar.day) }
                    }
                }
            }
            figcaption {
                "Agents: "
                @for (k, n) in named.iter().enumerate() {
                    span.legend { span class={ "swatch sw-" (k) } aria-hidden="true" {} " " (n) } " "
                }
                @if agents.len() > CHART_AGENTS { span.legend { span class={ "swatch sw-" (CHART_AGENTS) } aria-hidden="true" {} " other" } }
            }
        }
    }
}

#[cfg(test)]
#[path = "usage_tests.rs"]
mod tests;
