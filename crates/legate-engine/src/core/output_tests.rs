#![allow(clippy::unwrap_used)]
use super::*;

fn limits() -> OutputLimits {
    OutputLimits {
        max_events: 10,
        max_event_bytes: 2_000,
        max_answer_bytes: 100,
        max_stderr_bytes: 30,
    }
}

fn message(text: &str) -> EventKind {
    EventKind::Message { text: text.into() }
}

fn thought(text: &str) -> EventKind {
    EventKind::Thought { text: text.into() }
}

/// `event` through `meter` the way the pump sends it: the early check, then `admit`.
fn pass(meter: &mut Meter, event: EventKind, notices: &mut Vec<EventKind>) -> Fate {
    if meter.past_limit(&event) {
        return Fate::Gone;
    }
    meter.admit(event, notices)
}

fn limits_said(notices: &[EventKind]) -> Vec<String> {
    notices
        .iter()
        .filter_map(|n| match n {
            EventKind::Notice { detail, .. } if detail["event"] == "output.truncated" => {
                Some(detail["limit"].as_str().unwrap().to_string())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn events_past_the_count_are_dropped_with_one_notice_and_counted_by_kind() {
    // Three events already stored (the task's submitted and working statuses, a notice).
    let mut meter = Meter::new(limits(), (3, 300));
    let mut notices = Vec::new();
    for i in 0..7 {
        let fate = pass(&mut meter, thought(&format!("t{i}")), &mut notices);
        assert!(matches!(fate, Fate::Keep(_)), "{i}: {fate:?}");
    }
    assert!(notices.is_empty());
    // A plan update is an event like any other.
    let plan = EventKind::Plan { entries: vec![] };
    assert!(matches!(
        pass(&mut meter, plan, &mut notices),
        Fate::Drop(_)
    ));
    for _ in 0..5 {
        assert_eq!(pass(&mut meter, thought("x"), &mut notices), Fate::Gone);
    }
    // A message past the count is not stored but still part of the answer.
    assert_eq!(
        pass(&mut meter, message("answer"), &mut notices),
        Fate::Drop(message("answer"))
    );
    assert_eq!(limits_said(&notices), ["output.max_events"]);
    let EventKind::Notice { detail, message } = meter.summary().unwrap() else {
        panic!("a notice");
    };
    assert_eq!(detail["event"], "output.dropped");
    assert_eq!(detail["events"], 7);
    assert_eq!(detail["dropped"]["thought"]["events"], 5);
    assert_eq!(detail["dropped"]["thought"]["bytes"], 5);
    assert_eq!(detail["dropped"]["plan"]["events"], 1);
    assert_eq!(detail["dropped"]["message"]["events"], 1);
    assert_eq!(detail["limits"], serde_json::json!(["output.max_events"]));
    assert!(message.contains("7 events"), "{message}");
    assert_eq!(meter.answer_marker(), None);
}

#[test]
fn the_bytes_of_events_are_counted_as_stored() {
    let mut meter = Meter::new(limits(), (1, 1_900));
    let mut notices = Vec::new();
    let small = thought("ab");
    let size = stored_size(&small);
    assert_eq!(size, serde_json::to_string(&small).unwrap().len() as u64);
    assert!(matches!(
        pass(&mut meter, small, &mut notices),
        Fate::Keep(_)
    ));
    let big = thought(&"y".repeat(100));
    assert!(matches!(pass(&mut meter, big, &mut notices), Fate::Drop(_)));
    assert_eq!(limits_said(&notices), ["output.max_event_bytes"]);
}

#[test]
fn the_answer_is_cut_on_a_character_with_a_marker_and_one_notice() {
    let mut meter = Meter::new(limits(), (0, 0));
    let mut notices = Vec::new();
    let first = "a".repeat(98);
    assert_eq!(
        pass(&mut meter, message(&first), &mut notices),
        Fate::Keep(message(&first))
    );
    // "é" is two bytes: 98 + 1 + 2 > 100, so the cut falls before it.
    assert_eq!(
        pass(&mut meter, message("bé and more"), &mut notices),
        Fate::Keep(message("b"))
    );
    assert_eq!(pass(&mut meter, message("later"), &mut notices), Fate::Gone);
    assert_eq!(limits_said(&notices), ["output.max_answer_bytes"]);
    let marker = meter.answer_marker().unwrap();
    // "é and more" (11 bytes) and "later" (5).
    assert!(marker.contains("16 more bytes"), "{marker}");
    assert!(marker.contains("output.max_answer_bytes"), "{marker}");
}

#[test]
fn stderr_has_its_own_limit_per_turn() {
    let mut meter = Meter::new(limits(), (0, 0));
    let mut notices = Vec::new();
    let line = |s: &str| EventKind::Stderr { line: s.into() };
    // 20 bytes with its newline, then 10 left: "0123456789" with its newline is 11.
    assert_eq!(
        pass(&mut meter, line(&"e".repeat(19)), &mut notices),
        Fate::Keep(line(&"e".repeat(19)))
    );
    assert_eq!(
        pass(&mut meter, line("0123456789"), &mut notices),
        Fate::Keep(line("0123456789"))
    );
    assert_eq!(pass(&mut meter, line("more"), &mut notices), Fate::Gone);
    assert_eq!(limits_said(&notices), ["output.max_stderr_bytes"]);
    // Messages are unaffected.
    assert!(matches!(
        pass(&mut meter, message("m"), &mut notices),
        Fate::Keep(_)
    ));
}

#[test]
fn the_ceiling_is_twice_the_limits_of_what_was_sent() {
    let mut meter = Meter::new(limits(), (0, 0));
    let mut notices = Vec::new();
    for _ in 0..20 {
        pass(&mut meter, thought("x"), &mut notices);
        assert!(!meter.over_ceiling());
    }
    pass(&mut meter, thought("x"), &mut notices);
    assert!(meter.over_ceiling());

    // In bytes: an answer far past its limit (dropped before any work) passes it too.
    // The first 500 bytes count 400 cut off and the 100 kept as stored (about 130), each
    // later one its 500 bytes of text: past 4,000 with the eighth.
    let mut meter = Meter::new(limits(), (0, 0));
    for n in 1..=8 {
        pass(&mut meter, message(&"z".repeat(500)), &mut notices);
        assert_eq!(meter.over_ceiling(), n == 8, "{n}");
    }
    let e = ceiling_error(&limits());
    assert_eq!(e.code, legate_core::ErrorCode::TaskOutputLimit);
    assert!(e.message.contains("output.max_events"), "{}", e.message);
}

#[test]
fn nothing_dropped_says_nothing() {
    let mut meter = Meter::new(OutputLimits::default(), (2, 200));
    let mut notices = Vec::new();
    for i in 0..100 {
        pass(&mut meter, message(&format!("chunk {i}")), &mut notices);
    }
    assert!(notices.is_empty());
    assert_eq!(meter.summary(), None);
    assert_eq!(meter.answer_marker(), None);
    assert!(!meter.over_ceiling());
}

#[test]
fn a_plan_counts_the_bytes_of_what_changed_not_the_whole_plan_again() {
    // 300 steps, each set in progress then completed, the whole plan each time: whole, that
    // is about 300 * 2 * 300 entries of ~70 bytes (12 MB); stored as changes, far less.
    let mut meter = Meter::new(
        OutputLimits {
            max_events: 10_000,
            max_event_bytes: 1 << 20,
            max_answer_bytes: 100,
            max_stderr_bytes: 30,
        },
        (0, 0),
    );
    let mut entries: Vec<legate_core::PlanEntry> = (0..300)
        .map(|i| legate_core::PlanEntry {
            content: format!("Think: step {i} of the task"),
            priority: "medium".into(),
            status: "pending".into(),
        })
        .collect();
    let mut notices = Vec::new();
    for i in 0..300 {
        for status in ["in_progress", "completed"] {
            entries[i].status = status.into();
            let plan = EventKind::Plan {
                entries: entries.clone(),
            };
            assert!(
                matches!(pass(&mut meter, plan, &mut notices), Fate::Keep(_)),
                "step {i}"
            );
        }
    }
    assert!(notices.is_empty(), "{notices:?}");
    assert!(meter.bytes < 1 << 20, "{}", meter.bytes);
}
