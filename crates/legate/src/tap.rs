//! `legate tap TASK [--follow] [--json]`: a tapped task's protocol frames, read from the
//! store (the engine's `Records`), oldest first.
//!
//! Owns printing a frame: its number, its time, an arrow for its direction (`→` to the
//! agent, `←` from it, `!!` for Legate's marker), its protocol, and the frame with every
//! character a terminal would act on shown as a visible `\u{…}` (agent text is hostile);
//! with `--json`, the same characters written as JSON `\uXXXX` escapes (the same string once
//! decoded, inert on a terminal). Never decides whether a task was tapped (the engine says `TAP_OFF`), never writes.

use anyhow::Result;
use legate_core::{TapDirection, TapFrame};
use legate_engine::{Paths, Records};
use std::process::ExitCode;
use std::time::Duration;

/// How often `--follow` looks for new frames.
const POLL: Duration = Duration::from_millis(250);
/// Frames read from the store at a time.
const PAGE: usize = 500;

/// One frame as a single line, safe for a terminal.
pub(crate) fn frame_line(f: &TapFrame) -> String {
    let ts = humantime::format_rfc3339_millis(f.at.to_system_time());
    let arrow = match f.direction {
        TapDirection::ToAgent => "→",
        TapDirection::FromAgent => "←",
        TapDirection::Marker => "!!",
    };
    let cut = if f.truncated {
        format!(" [truncated; {} bytes on the wire]", f.wire_bytes)
    } else {
        String::new()
    };
    format!(
        "{:>5} {ts} {arrow} {} {}{cut}",
        f.seq,
        f.protocol.as_str(),
        legate_core::text::visible(&f.frame, &[])
    )
}

fn print(page: &[TapFrame], json: bool) -> Result<()> {
    for f in page {
        if json {
            out!("{}", crate::json_out::line(f)?)?;
        } else {
            out!("{}", frame_line(f))?;
        }
    }
    Ok(())
}

/// `legate tap`: every frame of the task, or followed until the task ends.
pub(crate) async fn tap(paths: &Paths, id: &str, follow: bool, json: bool) -> Result<ExitCode> {
    let records = Records::open(paths)?;
    let task = records.find_task(id)?;
    let mut cursor = 0;
    let mut ended = false;
    loop {
        let page = records.tap_frames(&task, cursor, PAGE)?;
        print(&page, json)?;
        if let Some(last) = page.last() {
            cursor = last.seq;
            continue;
        }
        // A task's frames are all stored before its end is: one more read after it ended.
        if !follow || ended {
            break;
        }
        ended = records.find_task(task.id.as_str())?.is_terminal();
        if !ended {
            tokio::time::sleep(POLL).await;
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use legate_core::{TapProtocol, TaskId, Timestamp};

    #[test]
    fn a_frame_line_shows_what_a_terminal_would_act_on() {
        let f = TapFrame {
            task_id: TaskId("t".into()),
            seq: 7,
            at: Timestamp(0),
            direction: TapDirection::FromAgent,
            protocol: TapProtocol::Acp,
            frame: "{\"x\":\"\u{1b}[2J\u{202e}gnp.exe\"}".into(),
            wire_bytes: 99,
            truncated: true,
            dropped: 0,
        };
        let line = frame_line(&f);
        assert!(
            !line.contains('\u{1b}') && !line.contains('\u{202e}'),
            "{line}"
        );
        assert!(line.contains("\\u{1b}[2J\\u{202e}gnp.exe"), "{line}");
        assert!(
            line.contains("    7 1970-01-01T00:00:00.000Z ← acp "),
            "{line}"
        );
        assert!(
            line.ends_with("[truncated; 99 bytes on the wire]"),
            "{line}"
        );
    }
}
