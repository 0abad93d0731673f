//! The usage page on hostile names, unreported usage, many days and the calendar.

use super::*;
use legate_core::TaskId;
use legate_engine::UsageTotals;
use proptest::prelude::*;

fn line(agent: &str, model: Option<&str>, total: Option<u64>) -> TaskUsage {
    TaskUsage {
        task_id: TaskId(format!("t-{agent}-{total:?}")),
        agent: agent.to_owned(),
        session_id: None,
        model: model.map(str::to_owned),
        created_at: Timestamp(0),
        totals: UsageTotals {
            tasks: 1,
            unreported: u64::from(total.is_none()),
            input_tokens: total.map(|t| t / 2),
            output_tokens: total.map(|t| t - t / 2),
            total_tokens: total,
            thinking_tokens: None,
            cache_read_tokens: None,
            observed_cumulative: None,
        },
        available: total.is_some(),
        partial: true,
        source: "turn".to_owned(),
        warnings: Vec::new(),
    }
}

const DAY: i64 = 86_400_000;

#[test]
fn days_are_civil_utc_dates() {
    assert_eq!(day_of(Timestamp(0)), "1970-01-01");
    assert_eq!(day_of(Timestamp(DAY - 1)), "1970-01-01");
    assert_eq!(day_of(Timestamp(951_782_400_000)), "2000-02-29");
    assert_eq!(day_of(Timestamp(1_796_083_200_000)), "2026-12-01");
    assert_eq!(day_of(Timestamp(-1)), "1969-12-31");
}

#[test]
fn groups_by_day_agent_and_model_and_keeps_unreported_apart() {
    let mut revisor = line("revisor", None, Some(7));
    revisor.created_at = Timestamp(DAY);
    let report = UsageReport {
        by_task: vec![
            line("claude", Some("opus"), Some(100)),
            line("claude", Some("opus"), None),
            revisor,
        ],
        ..UsageReport::default()
    };
    let g = group(&report);
    assert_eq!(g.total.tokens, 107);
    assert_eq!(g.total.tasks, 3);
    assert_eq!(g.total.unreported, 1);
    assert_eq!(g.by_agent["claude"].tokens, 100);
    assert_eq!(g.by_model[""].tokens, 7);
    assert_eq!(g.by_day["1970-01-02"]["revisor"].tokens, 7);
    let html = render(&g).into_string();
    assert!(html.contains("<title id=\"usage-svg-title\">"));
    assert!(html.contains("<desc id=\"usage-svg-desc\">"));
    assert!(html.contains("(not known)"));
    assert!(html.contains("1 reported no usage"));
}

#[test]
fn hostile_agent_and_model_names_are_escaped_in_svg_and_tables() {
    let evil = "<script>alert(1)</script>";
    let report = UsageReport {
        by_task: vec![line(evil, Some("</text><script>x()</script>"), Some(5))],
        ..UsageReport::default()
    };
    let html = render(&group(&report)).into_string();
    assert!(!html.contains("<script"), "{html}");
    assert!(!html.contains("</text><script"), "{html}");
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
}

#[test]
fn the_chart_keeps_the_last_days_and_folds_extra_agents() {
    let mut by_task = Vec::new();
    for d in 0..40 {
        for a in 0..(CHART_AGENTS + 2) {
            let mut l = line(&format!("agent{a}"), None, Some(10 + d));
            l.task_id = TaskId(format!("{d}-{a}"));
            l.created_at = Timestamp(i64::try_from(d).unwrap() * DAY);
            by_task.push(l);
        }
    }
    let report = UsageReport {
        by_task,
        ..UsageReport::default()
    };
    let g = group(&report);
    assert_eq!(g.by_day.len(), 40);
    let html = render(&g).into_string();
    assert_eq!(html.matches("<g>").count(), CHART_DAYS);
    assert!(
        !html.contains(">1970-01-01</text>"),
        "oldest days are off the chart"
    );
    assert!(html.contains(">1970-02-09</text>"));
    assert!(html.contains(" other"));
    // The tables keep every day.
    assert!(html.contains("<th scope=\"row\">1970-01-01</th>"));
}

#[test]
fn an_empty_report_says_so() {
    let html = render(&group(&UsageReport::default())).into_string();
    assert!(html.contains("No tasks yet."));
    assert!(!html.contains("<svg"));
}

/// Two agents on one day whose (remote-reported) counts are each near `u64::MAX`: the chart's
/// tallest day saturates instead of overflowing.
#[test]
fn huge_counts_of_two_agents_on_one_day_render() {
    let report = UsageReport {
        by_task: vec![
            line("a", None, Some(u64::MAX)),
            line("b", None, Some(u64::MAX)),
        ],
        ..UsageReport::default()
    };
    let html = render(&group(&report)).into_string();
    assert!(html.contains(&u64::MAX.to_string()));
}

proptest! {
    #[test]
    fn any_names_and_counts_render_escaped(agent in "\\PC{0,30}", model in "\\PC{0,30}", total in any::<u64>(), at in any::<i64>()) {
        let mut l = line(&agent, Some(&model), Some(total));
        l.created_at = Timestamp(at / 1000);
        let report = UsageReport { by_task: vec![l], ..UsageReport::default() };
        let g = group(&report);
        let html = render(&g).into_string();
        prop_assert!(!html.contains("<script"));
        let day = day_of(Timestamp(at / 1000));
        prop_assert_eq!(day.len() >= 10, true);
    }
}
