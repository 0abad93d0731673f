//! Tests of the turn's redaction: interleaved streams cut inside secrets, and every field of
//! the other events an agent writes.

use super::*;
use legate_core::{ErrorCode, ToolCallEvent, ToolCallUpdateEvent, ToolKind, ToolStatus};

/// A fake GitHub token, written in halves so that no scanner reading this file sees one.
fn token() -> String {
    format!("{}{}", "ghp_", "Zq7fK2mXw9Lb4Rt8Yp1Hc6Vn3Jd5Gs0Ae2Uk")
}

/// A fake PEM private key (two body lines and a short last one).
fn pem() -> String {
    let label = ["PRIVATE", "KEY"].join(" ");
    let line = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7q3Xf9Lm2Rt8Yp";
    format!("-----BEGIN {label}-----\n{line}\n{line}\nq9Lm2Rt8Yp==\n-----END {label}-----\n")
}

fn texts(events: &[EventKind]) -> (String, String, String) {
    let (mut message, mut thought, mut stderr) = (String::new(), String::new(), String::new());
    for e in events {
        match e {
            EventKind::Message { text } => message.push_str(text),
            EventKind::Thought { text } => thought.push_str(text),
            EventKind::Stderr { line } => {
                stderr.push_str(line);
                stderr.push('\n');
            }
            _ => {}
        }
    }
    (message, thought, stderr)
}

#[test]
fn interleaved_streams_split_inside_secrets_are_redacted_each() {
    let (token, pem) = (token(), pem());
    let message = format!("The token is {token} and the key:\n{pem}done\n");
    let thought = format!("I read {token}\n");
    let mut redactor = TurnRedactor::new();
    let mut out = Vec::new();
    // Seven bytes at a time, message and thought taking turns, a tool call between.
    let (m, t) = (message.as_bytes(), thought.as_bytes());
    for i in 0..m.len().div_ceil(7).max(t.len().div_ceil(7)) {
        for (bytes, thought) in [(m, false), (t, true)] {
            let Some(piece) = bytes.chunks(7).nth(i) else {
                continue;
            };
            let text = String::from_utf8_lossy(piece).into_owned();
            let e = if thought {
                EventKind::Thought { text }
            } else {
                EventKind::Message { text }
            };
            redactor.take(e, &mut out);
        }
        if i == 3 {
            redactor.take(
                EventKind::Mode {
                    mode_id: "x".into(),
                },
                &mut out,
            );
        }
    }
    for line in pem.lines() {
        redactor.take(EventKind::Stderr { line: line.into() }, &mut out);
    }
    redactor.finish(&mut out);
    let (m, t, e) = texts(&out);
    for text in [&m, &t, &e] {
        assert!(!text.contains(&token[4..20]), "{text}");
        assert!(!text.contains("MIIEvQIBADANBgkq"), "{text}");
    }
    assert!(
        m.contains("[REDACTED:github-token]") && m.contains("[REDACTED:private-key-block]"),
        "{m}"
    );
    assert!(m.ends_with("done\n"), "{m}");
    assert_eq!(t, "I read [REDACTED:github-token]\n");
    assert!(e.starts_with("-----BEGIN"), "{e}");
    assert!(e.contains("[REDACTED:private-key-block]"), "{e}");
}

#[test]
fn tool_calls_plans_notices_and_errors_are_redacted_whole() {
    let (token, pem) = (token(), pem());
    let call = redact_event(EventKind::ToolCall(ToolCallEvent {
        id: "t1".into(),
        title: format!("cat {token}"),
        tool_kind: ToolKind::Read,
        status: ToolStatus::Pending,
        locations: vec![],
        raw_input: Some(serde_json::json!({ "content": pem, "list": [token], token.clone(): 1 })),
    }));
    let update = redact_event(EventKind::ToolCallUpdate(ToolCallUpdateEvent {
        id: "t1".into(),
        title: None,
        tool_kind: None,
        status: Some(ToolStatus::Completed),
        locations: None,
        content: Some(pem.clone()),
    }));
    let notice = redact_event(EventKind::Notice {
        message: format!("bad line {token}"),
        detail: serde_json::json!({ "line": token }),
    });
    for e in [call, update, notice] {
        let wire = serde_json::to_string(&e).unwrap();
        assert!(
            !wire.contains(&token[4..20]) && !wire.contains("MIIEvQIBADANBgkq"),
            "{wire}"
        );
        assert!(wire.contains("[REDACTED:"), "{wire}");
    }
    let error = Error::new(
        ErrorCode::AgentExited,
        format!("the agent exited; its last stderr line: {token}"),
    );
    let hidden = hide_error(error);
    assert_eq!(hidden.code, ErrorCode::AgentExited);
    assert!(
        hidden.detail().ends_with("[REDACTED:github-token]"),
        "{}",
        hidden.detail()
    );
    let clean = hide_error(Error::new(ErrorCode::AgentExited, "exit 1"));
    assert_eq!(clean.detail(), "exit 1");
}

/// A turn's plans are redacted entry by entry as `redact_event` does, however the entries
/// move between updates: an entry the turn's last plan had at its place reuses its redaction,
/// any other is scanned.
#[test]
fn plans_of_a_turn_are_redacted_whatever_entries_repeat_or_move() {
    let token = token();
    let entry = |content: &str, status: &str| legate_core::PlanEntry {
        content: content.into(),
        priority: "medium".into(),
        status: status.into(),
    };
    let with = format!("push with {token}");
    let plans = [
        vec![entry(&with, "pending"), entry("test", "pending")],
        vec![entry(&with, "in_progress"), entry("test", "pending")],
        // A clean entry now where the credential was, and the credential where it was not.
        vec![entry("test", "in_progress"), entry(&with, "pending")],
        vec![
            entry("test", "completed"),
            entry("other", "pending"),
            entry(&with, "x"),
        ],
        vec![entry(&with, "completed")],
        vec![],
        vec![entry(&with, "pending")],
    ];
    let mut redactor = TurnRedactor::new();
    for plan in plans {
        let mut out = Vec::new();
        let expected = redact_event(EventKind::Plan {
            entries: plan.clone(),
        });
        redactor.take(EventKind::Plan { entries: plan }, &mut out);
        assert_eq!(out, [expected]);
        let wire = serde_json::to_string(&out).unwrap();
        assert!(!wire.contains(&token[4..20]), "{wire}");
    }
}

/// A report is parsed from text the streams never saw whole (JSON escapes, a token joined
/// across pieces): it is redacted again, string by string, its shape kept.
#[test]
fn a_report_is_redacted_whole_and_keeps_its_shape() {
    use legate_core::report::{PlanReport, Report, ReportBody, ReportOrigin};
    let secret = token();
    let report = Report {
        origin: ReportOrigin::AgentReported,
        citations_checked: false,
        body: ReportBody::Plan(PlanReport {
            summary: format!("use {secret} to push"),
            steps: vec![],
            unverified: vec![secret.clone()],
        }),
    };
    let hidden = hide_report(report).expect("a plan stays a plan");
    let json = serde_json::to_string(&hidden).unwrap();
    assert!(!json.contains(&secret), "{json}");
    assert!(json.contains("[REDACTED:"), "{json}");
    assert!(matches!(hidden.body, ReportBody::Plan(_)));
}
