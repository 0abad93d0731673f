//! How tasks and events look in a terminal.
//!
//! `legate run` and `legate events` print one line per meaningful event (tool calls,
//! permission decisions, plans, stderr) and stream the answer's text. On a terminal, a
//! progress line at the bottom shows what the agent is doing; it is erased before any other
//! output, so pipes and logs only ever get whole lines. `legate run` redraws it on a timer
//! ([`Renderer::tick`]) too, so the elapsed time moves while the agent is silent.

use legate_core::{Event, EventKind, Task, TaskState, ToolStatus};
use std::io::{IsTerminal, Write};
use std::time::Instant;

/// Prints events as they come.
#[derive(Debug)]
pub struct Renderer {
    tty: bool,
    progress_shown: bool,
    in_answer: bool,
    started: Instant,
    events: u64,
    tools: u32,
    activity: String,
    titles: std::collections::HashMap<String, String>,
    last_plan: Vec<String>,
}

impl Renderer {
    /// A renderer for stderr (progress) and stdout (content).
    pub fn new() -> Self {
        Self {
            tty: std::io::stderr().is_terminal(),
            progress_shown: false,
            in_answer: false,
            started: Instant::now(),
            events: 0,
            tools: 0,
            activity: "starting".into(),
            titles: std::collections::HashMap::new(),
            last_plan: Vec::new(),
        }
    }

    /// Prints one event.
    pub fn event(&mut self, e: &Event) {
        self.events += 1;
        match &e.kind {
            EventKind::Message { text } => {
                if !self.in_answer {
                    self.line("");
                    self.in_answer = true;
                    self.activity = "answering".into();
                }
                self.clear_progress();
                print!("{}", terminal_text(text));
                let _ = std::io::stdout().flush();
            }
            EventKind::Thought { text } => {
                self.activity = format!("thinking: {}", first_line(&terminal_text(text), 60));
            }
            EventKind::ToolCall(c) => {
                self.tools += 1;
                self.titles.insert(c.id.clone(), c.title.clone());
                self.activity = format!("{} {}", c.tool_kind.as_str(), first_line(&c.title, 60));
                self.line(&format!("  ▸ {} {}", c.tool_kind.as_str(), c.title));
            }
            EventKind::ToolCallUpdate(u) => {
                if let Some(status) = u.status
                    && matches!(status, ToolStatus::Completed | ToolStatus::Failed)
                {
                    let mark = if status == ToolStatus::Completed {
                        "✓"
                    } else {
                        "✗"
                    };
                    let title = u
                        .title
                        .clone()
                        .or_else(|| self.titles.get(&u.id).cloned())
                        .unwrap_or_else(|| u.id.clone());
                    let mut line = format!("  {mark} {} {}", status.as_str(), title);
                    if let Some(c) = u.content.as_deref().filter(|c| !c.trim().is_empty()) {
                        line.push_str(&format!(" — {}", first_line(c, 100)));
                    }
                    self.line(&line);
                }
            }
            EventKind::Permission { title, verdict, .. } => {
                let (mark, word) = if verdict.is_allow() {
                    ("✔", "allowed")
                } else {
                    ("⛔", "refused")
                };
                let option = verdict.option_id.as_deref().unwrap_or("cancelled");
                self.line(&format!(
                    "  {mark} {word} {title}: {} [{option}]",
                    verdict.reason
                ));
            }
            EventKind::Plan { entries } => {
                let done = entries.iter().filter(|e| e.status == "completed").count();
                self.activity = format!("plan {done}/{}", entries.len());
                let steps: Vec<String> = entries.iter().map(|e| e.content.clone()).collect();
                if steps != self.last_plan {
                    self.line(&format!("  plan: {}", steps.join(" → ")));
                    self.last_plan = steps;
                }
            }
            EventKind::FsAccess {
                op,
                path,
                allowed,
                reason,
            } if !allowed => {
                self.line(&format!(
                    "  ⛔ fs {op} {}: {}",
                    path.display(),
                    reason.as_deref().unwrap_or("refused")
                ));
            }
            EventKind::Connection(c) => {
                let mark = if c.decision == legate_core::Decision::Allow {
                    "⇄"
                } else {
                    "⛔"
                };
                self.line(&format!("  {mark} network: {}", c.describe()));
            }
            EventKind::Stderr { line } => self.line(&format!("  stderr: {line}")),
            EventKind::Unparsed { line } => self.line(&format!("  unparsed output: {line}")),
            EventKind::Notice { message, .. } => self.line(&format!("  {message}")),
            EventKind::Mode { mode_id } => self.line(&format!("  mode → {mode_id}")),
            EventKind::Status { state, message, .. } => {
                self.activity = state.to_string();
                // Terminal states are told by the summary; input-required needs its reason.
                if *state == TaskState::InputRequired {
                    self.line(&format!("  {state}: {}", message.as_deref().unwrap_or("")));
                }
            }
            _ => {}
        }
        self.show_progress();
    }

    /// Whether a progress line is kept (stderr is a terminal), so [`Renderer::tick`] is worth
    /// calling.
    pub fn live(&self) -> bool {
        self.tty
    }

    /// Redraws the progress line, so that its elapsed time moves while the agent is silent.
    pub fn tick(&mut self) {
        self.show_progress();
    }

    /// Prints the closing summary of a finished task.
    pub fn summary(&mut self, task: &Task) {
        self.clear_progress();
        if self.in_answer {
            println!();
            self.in_answer = false;
        }
        let mut parts = vec![task.state.to_string()];
        if let Some(e) = &task.error {
            parts.push(e.code.to_string());
        }
        if let Some(r) = &task.result {
            if let Some(s) = &r.stop_reason {
                parts.push(s.clone());
            }
            let mut tools = format!(
                "{} tool call{}",
                r.tool_calls,
                if r.tool_calls == 1 { "" } else { "s" }
            );
            if r.failed_tool_calls > 0 {
                tools.push_str(&format!(" ({} failed)", r.failed_tool_calls));
            }
            parts.push(tools);
            if !r.refusals.is_empty() {
                parts.push(format!("{} refused", r.refusals.len()));
            }
        }
        parts.push(usage_text(task));
        parts.push(format!("{:.2} s", self.started.elapsed().as_secs_f64()));
        eprintln!("task {} · {}", task.id, parts.join(" · "));
        if let Some(m) = &task.status_message {
            eprintln!("{}", terminal_text(m));
        }
    }

    /// Prints one of Legate's lines; what an agent chose inside it cannot act on the terminal.
    fn line(&mut self, text: &str) {
        // One line: an agent's newline inside it cannot start a line of its own (a forged
        // "✔ allowed …").
        let text = terminal_text(text).replace('\n', "\\n");
        let text = text.as_str();
        self.clear_progress();
        if self.in_answer && !text.is_empty() {
            println!();
            self.in_answer = false;
        }
        eprintln!("{text}");
    }

    fn show_progress(&mut self) {
        if !self.tty || self.in_answer {
            return;
        }
        eprint!(
            "\r\x1b[2K⠿ {:.1} s · {} events · {} tools · {}",
            self.started.elapsed().as_secs_f64(),
            self.events,
            self.tools,
            terminal_text(&self.activity).replace('\n', " ")
        );
        let _ = std::io::stderr().flush();
        self.progress_shown = true;
    }

    fn clear_progress(&mut self) {
        if self.progress_shown {
            eprint!("\r\x1b[2K");
            self.progress_shown = false;
        }
    }
}

/// Usage as a short phrase.
pub fn usage_text(task: &Task) -> String {
    match &task.usage {
        None => "usage not reported".into(),
        Some(u) => {
            let mut parts = Vec::new();
            if let Some(v) = u.input_tokens {
                parts.push(format!("in {v}"));
            }
            if let Some(v) = u.output_tokens {
                parts.push(format!("out {v}"));
            }
            if let Some(v) = u.total_tokens {
                parts.push(format!("total {v}"));
            }
            if let (Some(used), Some(size)) = (u.context_used, u.context_size) {
                parts.push(format!("context {used}/{size}"));
            }
            if parts.is_empty() {
                "usage not reported".into()
            } else {
                format!("tokens {}", parts.join(", "))
            }
        }
    }
}

/// One event as a single plain line, for `legate events`.
pub fn event_line(e: &Event) -> String {
    let ts = humantime::format_rfc3339_millis(e.at.to_system_time());
    let body = serde_json::to_string(&e.kind).unwrap_or_else(|_| e.kind.type_name().to_string());
    format!("{:>5} {ts} {body}", e.seq)
}

fn first_line(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or("").trim();
    if line.chars().count() > max {
        let cut: String = line.chars().take(max).collect();
        format!("{cut}…")
    } else {
        line.to_string()
    }
}

/// The line `legate show` prints for a copy's disk use: what it was made of, and what its
/// directory has allocated now, labelled for what that figure can and cannot say.
pub fn copy_disk_line(d: &legate_engine::CopyDisk) -> String {
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0));
    let made = if d.snapshot {
        "a snapshot of the project's base (every block shared with it until written: no new disk when made)".to_string()
    } else if d.reflinked_files == 0 {
        "written in full".to_string()
    } else {
        format!(
            "{} of them reflinks (blocks shared with the project until written: no new disk when made)",
            d.reflinked_files
        )
    };
    let at_least = if d.complete { "" } else { "at least " };
    let shared = if d.reflinked_files == 0 && !d.snapshot {
        ""
    } else {
        ", shared blocks counted in full"
    };
    format!(
        "copy     {} files, {} bytes, {made}; allocated now {at_least}{}{shared}; content: {} files scanned, {} trusted from the scan cache",
        d.included_files,
        d.bytes,
        mib(d.allocated_bytes),
        d.scanned_files,
        d.trusted_files
    )
}

/// The lines `legate show` adds for a copy task's integration: the integration, and each
/// interrupted one with which way recovery finished it.
pub fn integration_lines(record: &legate_engine::ReviewRecord) -> Vec<String> {
    let at = |ts: legate_core::Timestamp| {
        humantime::format_rfc3339_seconds(ts.to_system_time()).to_string()
    };
    let mut lines = Vec::new();
    for r in &record.recoveries {
        let what = match r.outcome {
            legate_engine::Outcome::RolledForward => {
                "rolled forward (the project is exactly integrated)"
            }
            legate_engine::Outcome::RolledBack => "rolled back (the project is as it was)",
        };
        let mut line = format!(
            "recovery an interrupted integration of {} files was {what} at {}, sha256 {}",
            r.files,
            at(r.recovered_at),
            r.sha256
        );
        if !r.conflicts.is_empty() {
            line.push_str(&format!("; left as found: {}", r.conflicts.join(", ")));
        }
        lines.push(line);
    }
    if let Some(i) = &record.integration {
        lines.push(format!(
            "integrated {} files at {}, sha256 {}",
            i.result.files.len(),
            at(i.integrated_at),
            i.sha256
        ));
    }
    lines
}

/// The lines `legate show` prints for a planner's or reviewer's checked report. Every text
/// the agent wrote is flattened to one line without control characters (no escape sequence
/// of the agent's reaches the terminal) and bounded.
pub fn report_lines(report: &legate_core::Report) -> Vec<String> {
    use legate_core::ReportBody;
    let t = |s: &str| clean(s, 300);
    let mut lines = Vec::new();
    match &report.body {
        ReportBody::Plan(p) => {
            lines.push(format!(
                "report   plan ({}; no step has been carried out)",
                report.origin
            ));
            lines.push(format!("summary  {}", t(&p.summary)));
            for (i, s) in p.steps.iter().enumerate() {
                let files: Vec<String> = s.files.iter().map(|f| clean(f, 200)).collect();
                lines.push(format!("step {:<3} {}", i + 1, t(&s.step)));
                lines.push(format!("         files: {}", files.join(", ")));
                lines.push(format!("         check: {}", t(&s.check)));
            }
            for u in &p.unverified {
                lines.push(format!("unverified {}", t(u)));
            }
        }
        ReportBody::Review(r) => {
            let checked = if report.citations_checked {
                "citations checked against the copy"
            } else {
                "citations not checked"
            };
            lines.push(format!("report   review ({}; {checked})", report.origin));
            lines.push(format!("summary  {}", t(&r.summary)));
            let files: Vec<String> = r.reviewed_files.iter().map(|f| clean(f, 200)).collect();
            lines.push(format!("reviewed {}", files.join(", ")));
            for (i, f) in r.findings.iter().enumerate() {
                lines.push(format!(
                    "finding {:<2} {} {}:{} \"{}\"",
                    i + 1,
                    f.severity,
                    clean(&f.path, 200),
                    f.line,
                    clean(&f.quote, 120)
                ));
                lines.push(format!("         {}", t(&f.message)));
                lines.push(format!("         impact: {}", t(&f.impact)));
                lines.push(format!("         fix: {}", t(&f.suggestion)));
            }
            if r.findings.is_empty() {
                lines.push("findings none".to_string());
            }
            for u in &r.unverified {
                lines.push(format!("unverified {}", t(u)));
            }
        }
    }
    lines
}

/// `s` as it may reach a terminal: newlines and tabs kept, every other control character
/// (escape sequences: a clipboard write, a cursor move, a carriage return that rewrites the
/// line), every bidirectional override and every invisible format character shown as a
/// visible `\u{…}` instead of acting ([`legate_core::text::visible`], the table the dashboard
/// uses too). For any text an agent, a caller or a remote chose, before `legate run`,
/// `events` or `show` prints it (issue 29, finding 7).
pub(crate) fn terminal_text(s: &str) -> std::borrow::Cow<'_, str> {
    legate_core::text::visible(s, &['\n', '\t'])
}

/// `s` on one line: whitespace runs made one space, control characters dropped, at most
/// `max` characters. For any text an agent or a remote server chose, before it reaches the
/// terminal.
pub(crate) fn clean(s: &str, max: usize) -> String {
    flattened(s, max, |c, flat| {
        if !c.is_control() {
            flat.push(c);
        }
    })
}

/// `s` with its whitespace runs made one space and every other character given to `put` (which
/// writes what stands for it), cut to `max` characters with `…` after a cut.
pub(crate) fn flattened(s: &str, max: usize, put: impl Fn(char, &mut String)) -> String {
    let mut flat = String::new();
    for c in s.split_whitespace().collect::<Vec<_>>().join(" ").chars() {
        put(c, &mut flat);
    }
    if flat.chars().count() > max {
        format!("{}…", flat.chars().take(max).collect::<String>())
    } else {
        flat
    }
}

#[cfg(test)]
mod terminal_tests {
    use super::*;

    /// An agent's escape sequences (a clipboard write, a line erase and rewrite) and a
    /// right-to-left override are shown, not obeyed; text and newlines pass as they are.
    #[test]
    fn what_an_agent_writes_cannot_act_on_the_terminal() {
        let hostile =
            "done\x1b]52;c;Y3VybCB4fHNo\x07\r\x1b[2K  \u{2714} allowed rm -rf /\u{202e}txt.exe\n";
        let shown = terminal_text(hostile);
        for c in ['\x1b', '\x07', '\r', '\u{202e}'] {
            assert!(!shown.contains(c), "{c:?} in {shown:?}");
        }
        assert!(
            shown.contains("\\u{1b}]52;c;") && shown.ends_with("txt.exe\n"),
            "{shown}"
        );
        assert_eq!(terminal_text("plain\ttext\n"), "plain\ttext\n");
    }
}

#[cfg(test)]
mod report_tests {
    use super::*;
    use legate_core::{Finding, Report, ReportBody, ReportOrigin, ReviewReport, Severity};

    #[test]
    fn a_review_prints_its_findings_without_the_agents_escapes() {
        let report = Report {
            origin: ReportOrigin::AgentReported,
            citations_checked: true,
            body: ReportBody::Review(ReviewReport {
                summary: "one\nthing \u{1b}[31mred".into(),
                reviewed_files: vec!["src/lib.rs".into()],
                findings: vec![Finding {
                    severity: Severity::P1,
                    path: "src/lib.rs".into(),
                    line: 2,
                    quote: "x.unwrap()".into(),
                    message: "panics".into(),
                    impact: "callers".into(),
                    suggestion: "return a Result".into(),
                }],
                unverified: vec![],
            }),
        };
        let lines = report_lines(&report);
        assert_eq!(
            lines[0],
            "report   review (agent-reported; citations checked against the copy)"
        );
        assert_eq!(lines[1], "summary  one thing [31mred");
        assert_eq!(lines[3], "finding 1  P1 src/lib.rs:2 \"x.unwrap()\"");
        assert!(lines.iter().all(|l| !l.contains('\u{1b}')));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copys_disk_line_says_what_its_figure_counts() {
        let mut d = legate_engine::CopyDisk {
            included_files: 10,
            bytes: 4096,
            reflinked_files: 0,
            scanned_files: 11,
            trusted_files: 0,
            snapshot: false,
            allocated_bytes: 3 * 1024 * 1024,
            complete: true,
        };
        assert_eq!(
            copy_disk_line(&d),
            "copy     10 files, 4096 bytes, written in full; allocated now 3.0 MiB; content: 11 files scanned, 0 trusted from the scan cache"
        );
        d.reflinked_files = 9;
        d.complete = false;
        (d.scanned_files, d.trusted_files) = (1, 10);
        let line = copy_disk_line(&d);
        assert!(
            line.ends_with("; content: 1 files scanned, 10 trusted from the scan cache"),
            "{line}"
        );
        assert!(line.contains("9 of them reflinks"), "{line}");
        assert!(line.contains("no new disk when made"), "{line}");
        assert!(
            line.contains("allocated now at least 3.0 MiB, shared blocks counted in full;"),
            "{line}"
        );
        (d.snapshot, d.reflinked_files, d.complete) = (true, 0, true);
        let line = copy_disk_line(&d);
        assert!(line.contains("a snapshot of the project's base"), "{line}");
        assert!(
            line.contains("allocated now 3.0 MiB, shared blocks counted in full;"),
            "{line}"
        );
    }
}
