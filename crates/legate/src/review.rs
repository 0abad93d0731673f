//! The review commands of the CLI: `diff`, `verify`, `test`, `integrate`, `discard` and
//! `cleanup`, over a copy task. Each translates arguments into one engine call and prints its
//! answer; every rule (sha binding, staleness, approval) is the engine's.

use anyhow::Result;
use async_trait::async_trait;
use legate_core::{Error, ErrorCode};
use legate_engine::{Confirmation, ConfirmationRequest, Confirmer, Engine, TestEvidence};
use legate_engine::{Review, TestCommand, TestStatus};
use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

/// `legate diff ID [--stat] [--json] [--sha256 S]`.
pub async fn diff(
    engine: &Engine,
    id: &str,
    stat: bool,
    json: bool,
    sha: Option<&str>,
) -> Result<ExitCode> {
    if stat || json {
        let report = engine.reviews().preview_bound(id, sha).await?;
        if json {
            out!("{}", crate::json_out::pretty(&report)?)?;
            return Ok(ExitCode::SUCCESS);
        }
        for f in &report.patch.files {
            let counts = match (f.insertions, f.deletions) {
                (Some(a), Some(d)) => format!("+{a} -{d}"),
                _ => "binary".to_string(),
            };
            out!("{:?}  {:<12} {}", f.status, counts, f.path)?;
        }
        let s = &report.patch.summary;
        out!(
            "{} files changed ({} added, {} modified, {} deleted), +{} -{}, {} binary",
            s.files_changed,
            s.added,
            s.modified,
            s.deleted,
            s.insertions,
            s.deletions,
            s.binary_files
        )?;
        out!("sha256 {}", report.patch.sha256)?;
        match (&report.verification, &report.stale) {
            (None, _) => out!("verification: none")?,
            (Some(_), Some(why)) => out!("verification: stale ({why})")?,
            (Some(v), None) => out!(
                "verification: {}",
                if v.passed {
                    "passed, current"
                } else {
                    "did not pass"
                }
            )?,
        }
        for t in &report.tests {
            out!("{}", stat_test_line(t))?;
        }
        if !report.read_only_violations.is_empty() {
            out!(
                "{}: {}",
                ErrorCode::ReadOnlyViolation,
                report.read_only_violations.join(", ")
            )?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let preview = engine.reviews().patch(id, sha).await?;
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&preview.patch)?;
    stdout.flush()?;
    eprintln!(
        "{} files changed, sha256 {}",
        preview.files.len(),
        preview.sha256
    );
    Ok(ExitCode::SUCCESS)
}

/// The review file: a JSON array of reviews, or `{"sha256": …, "reviews": [...]}`.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum ReviewFile {
    List(Vec<Review>),
    Bound {
        sha256: Option<String>,
        reviews: Vec<Review>,
    },
}

/// `legate verify ID --review FILE.json [--sha256 S]`.
pub async fn verify(
    engine: &Engine,
    id: &str,
    file: &Path,
    sha: Option<String>,
) -> Result<ExitCode> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        Error::caused_by(
            ErrorCode::InvalidInput,
            format!("could not read {}", file.display()),
            e,
        )
    })?;
    let parsed: ReviewFile = serde_json::from_str(&text).map_err(|e| {
        Error::quoting(
            ErrorCode::InvalidInput,
            format!("{} is not a list of reviews", file.display()),
            e,
        )
    })?;
    let (file_sha, reviews) = match parsed {
        ReviewFile::List(r) => (None, r),
        ReviewFile::Bound { sha256, reviews } => (sha256, reviews),
    };
    let sha = match sha.or(file_sha) {
        Some(s) => s,
        None => engine.reviews().preview(id).await?.patch.sha256,
    };
    let v = engine.reviews().verify(id, &sha, reviews).await?;
    for c in &v.criteria {
        out!(
            "{} {}{}",
            if c.passed { "✔" } else { "✘" },
            c.criterion_id,
            if c.problems.is_empty() {
                String::new()
            } else {
                format!(": {}", c.problems.join("; "))
            }
        )?;
    }
    out!(
        "verification {} for sha256 {}",
        if v.passed { "passed" } else { "did not pass" },
        v.sha256
    )?;
    Ok(if v.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `legate test ID [--timeout S] [--sha256 S] [--retries N] [--fresh] -- CMD ARGS…`.
pub async fn test(
    engine: &Engine,
    id: &str,
    command: Vec<String>,
    timeout: Option<u64>,
    sha: Option<String>,
    retries: u8,
    fresh: bool,
) -> Result<ExitCode> {
    let mut parts = command.into_iter();
    let executable = parts
        .next()
        .ok_or_else(|| crate::coded!(InvalidInput, "name the command after --"))?;
    let sha = match sha {
        Some(s) => s,
        None => engine.reviews().preview(id).await?.patch.sha256,
    };
    let (evidence, run) = engine
        .reviews()
        .test_retrying(
            id,
            &sha,
            legate_engine::TestRun {
                command: TestCommand {
                    executable,
                    args: parts.collect(),
                },
                timeout: timeout.map(Duration::from_secs),
                selection: None,
                fresh,
            },
            retries,
        )
        .await?;
    print_evidence(&evidence)?;
    let Some(run) = run else {
        return Ok(if evidence.passed {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    };
    let run = match run.continuation_task_ids.is_empty() {
        true => run,
        false => {
            out!(
                "fix turns started: {} (waiting)",
                run.continuation_task_ids.join(", ")
            )?;
            engine.reviews().wait_retries(id).await?.unwrap_or(run)
        }
    };
    for a in &run.attempts {
        out!(
            "attempt {} on task {}: test #{} {} (sha256 {})",
            a.attempt,
            a.task_id,
            a.test_id,
            if a.passed { "passed" } else { "failed" },
            a.sha256
        )?;
    }
    out!("retries {}; final sha256 {}", run.state, run.final_sha256)?;
    if let Some(e) = &run.error {
        eprintln!("{}: {}", e.code, e.message);
    }
    Ok(if run.state == legate_engine::RetriesState::Passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// One test record's line in `legate diff --stat`. The command is a caller's, so it is shown
/// on one line with its escapes and bidirectional marks made visible.
fn stat_test_line(t: &TestStatus) -> String {
    format!(
        "test #{} {} {}{}",
        t.evidence.id,
        if t.evidence.passed {
            "passed"
        } else {
            "failed"
        },
        crate::one_line(&t.evidence.command.executable, 100),
        if t.stale { " (stale)" } else { "" }
    )
}

/// `c` on one line, executable then arguments, as it may reach a terminal: a caller chose it,
/// so whitespace runs are one space and every escape or bidirectional mark is shown, not obeyed.
pub(crate) fn command_line(c: &TestCommand, max: usize) -> String {
    let words: Vec<&str> = std::iter::once(c.executable.as_str())
        .chain(c.args.iter().map(String::as_str))
        .collect();
    crate::one_line(&words.join(" "), max)
}

/// A test command's stdout and stderr as `legate test` prints them, each `None` when empty.
/// The command runs code the agent wrote, so its output keeps newlines and tabs and shows
/// every other control character and bidirectional mark as a visible `\u{…}`.
fn evidence_output(e: &TestEvidence) -> (Option<String>, Option<String>) {
    let shown =
        |s: &str| (!s.is_empty()).then(|| crate::render::terminal_text(s.trim_end()).into_owned());
    (shown(&e.stdout), shown(&e.stderr))
}

fn print_evidence(e: &TestEvidence) -> std::io::Result<()> {
    let (stdout, stderr) = evidence_output(e);
    if let Some(stdout) = stdout {
        out!("{stdout}")?;
    }
    if let Some(stderr) = stderr {
        eprintln!("{stderr}");
    }
    out!(
        "test #{} {}{}: exit {}{} in {} ms, confinement {}, network {}, sha256 {}",
        e.id,
        if e.passed { "passed" } else { "failed" },
        if e.fresh {
            " in a fresh tree of the patch"
        } else {
            ""
        },
        e.exit_code
            .map(|c| c.to_string())
            .unwrap_or_else(|| "none".into()),
        if e.timed_out { " (timed out)" } else { "" },
        e.duration_ms.unwrap_or(0),
        e.confinement,
        e.network,
        e.sha256_after
    )?;
    for c in &e.connections {
        out!("  connection {}", c.describe())?;
    }
    if e.connections_not_kept > 0 {
        out!(
            "  … and {} more connections, counted and not kept",
            e.connections_not_kept
        )?;
    }
    if let Some(err) = &e.error {
        out!("{}: {}", err.code, err.message)?;
    }
    Ok(())
}

/// Asks on the terminal in approval mode `ask`; without a terminal it cannot ask.
struct TerminalApprover;

#[async_trait]
impl Confirmer for TerminalApprover {
    async fn confirm(&self, r: &ConfirmationRequest) -> Confirmation {
        if !std::io::stdin().is_terminal() {
            return Confirmation::Cancel;
        }
        eprintln!(
            "integrate task {} into {}? sha256 {}",
            r.task_id,
            r.source.display(),
            r.sha256
        );
        for f in &r.files {
            eprintln!(
                "  {:?} {} (+{} -{})",
                f.status,
                f.path,
                f.insertions.map(|n| n.to_string()).unwrap_or("?".into()),
                f.deletions.map(|n| n.to_string()).unwrap_or("?".into())
            );
        }
        eprint!("type yes to integrate: ");
        let answer = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).map(|_| line)
        })
        .await;
        match answer {
            Ok(Ok(line)) if line.trim() == "yes" => Confirmation::Accept { confirm: true },
            Ok(Ok(_)) => Confirmation::Decline,
            _ => Confirmation::Cancel,
        }
    }
}

/// `legate integrate ID [--sha256 S]`.
pub async fn integrate(engine: &Engine, id: &str, sha: Option<&str>) -> Result<ExitCode> {
    let r = engine
        .reviews()
        .integrate(id, sha, Some(&TerminalApprover))
        .await?;
    for f in &r.result.files {
        out!("integrated {f}")?;
    }
    for f in &r.result.restored_byte_order_marks {
        out!("restored the byte order mark of {f}")?;
    }
    for f in &r.result.leftover_files {
        out!("leftover (could not be removed): {f}")?;
    }
    out!(
        "integrated sha256 {} ({} files)",
        r.sha256,
        r.result.files.len()
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `legate discard ID`.
pub async fn discard(engine: &Engine, id: &str) -> Result<ExitCode> {
    let r = engine.reviews().discard(id).await?;
    out!("discarded {}", r.copy_directory.display())?;
    Ok(ExitCode::SUCCESS)
}

/// `legate cleanup`.
pub async fn cleanup(engine: &Engine) -> Result<ExitCode> {
    let r = engine.reviews().cleanup().await?;
    for id in &r.removed {
        out!("removed the copy of {id}")?;
    }
    for id in &r.orphans_removed {
        out!("removed the orphaned directories of {id}")?;
    }
    if r.judge_dirs_removed > 0 {
        out!(
            "removed {} supervising-agent directories left by stopped Legate processes",
            r.judge_dirs_removed
        )?;
    }
    if r.bases_removed > 0 {
        out!(
            "removed the bases of {} projects not copied for 7 days",
            r.bases_removed
        )?;
    }
    if r.scan_verdicts_removed > 0 {
        out!(
            "removed the scan verdicts of {} projects not copied for 30 days",
            r.scan_verdicts_removed
        )?;
    }
    out!(
        "{} removed, {} orphaned removed, {} kept within retention",
        r.removed.len(),
        r.orphans_removed.len(),
        r.kept
    )?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clipboard write (OSC 52), a line erased and rewritten, and a right-to-left override.
    const HOSTILE: &str = "ok\x1b]52;c;Y3VybCB4fHNo\x07\r\x1b[2Ktest passed\u{202e}txt.exe";

    fn evidence(command: TestCommand, output: &str) -> TestEvidence {
        TestEvidence {
            id: 1,
            source: legate_engine::TestSource::LegateExecutor,
            command,
            exit_code: Some(1),
            signal: None,
            timed_out: false,
            passed: false,
            stdout: format!("{output}\n\tsecond line\n"),
            stderr: output.to_string(),
            output_truncated: false,
            sha256_before: "a".repeat(64),
            sha256_after: "a".repeat(64),
            duration_ms: Some(1),
            confinement: "full".into(),
            network: "denied".into(),
            connections: vec![],
            connections_not_kept: 0,
            isolation: None,
            sandbox: None,
            fresh: false,
            recorded_at: legate_core::Timestamp(0),
            error: None,
        }
    }

    fn assert_shown(text: &str) {
        for c in ['\x1b', '\x07', '\r', '\u{202e}'] {
            assert!(!text.contains(c), "{c:?} in {text:?}");
        }
        assert!(text.contains("\\u{1b}]52;c;"), "{text}");
        assert!(text.contains("\\u{202e}txt.exe"), "{text}");
    }

    #[test]
    fn a_test_commands_output_cannot_act_on_the_terminal() {
        let plain = TestCommand {
            executable: "cargo".into(),
            args: vec!["test".into()],
        };
        let (stdout, stderr) = evidence_output(&evidence(plain, HOSTILE));
        let (stdout, stderr) = (stdout.unwrap_or_default(), stderr.unwrap_or_default());
        assert_shown(&stdout);
        assert_shown(&stderr);
        assert!(stdout.ends_with("txt.exe\n\tsecond line"), "{stdout}");
    }

    #[test]
    fn a_callers_test_command_cannot_act_on_the_terminal() {
        let hostile = TestCommand {
            executable: HOSTILE.into(),
            args: vec!["a\nb".into()],
        };
        let line = stat_test_line(&TestStatus {
            evidence: evidence(hostile.clone(), ""),
            stale: false,
        });
        assert_shown(&line);
        assert!(line.starts_with("test #1 failed ok\\u{1b}]52;c;"), "{line}");
        let line = command_line(&hostile, 200);
        assert_shown(&line);
        assert!(line.ends_with("txt.exe a b"), "{line}");
    }
}
