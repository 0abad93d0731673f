//! `legate logs [--follow] [--task ID] [--json]`: the log files' lines, oldest first, as a
//! person reads them (or as written, with `--json`).
//!
//! Reading and filtering are `legate_logs`'; this module only prints, each value through
//! [`crate::render::terminal_text`] (an agent's words in a field are shown, not obeyed).

use anyhow::Result;
use legate_logs::{Follow, Line};
use serde_json::Value;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

/// Prints the lines under `dir` (task `task`'s only), then, with `follow`, new ones until
/// interrupted.
pub async fn print(dir: &Path, task: Option<String>, follow: bool, json: bool) -> Result<ExitCode> {
    let task = task.as_deref();
    // Followed from before the read: a line written in between shows twice, never not at all.
    let mut following = follow.then(|| Follow::new(dir, task));
    let lines = legate_logs::read(dir, task).map_err(|e| {
        anyhow::Error::from(legate_core::Error::caused_by(
            legate_core::ErrorCode::Internal,
            format!("the logs under {} could not be read", dir.display()),
            e,
        ))
    })?;
    for line in &lines {
        show(line, json)?;
    }
    let Some(following) = &mut following else {
        return Ok(ExitCode::SUCCESS);
    };
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = tick.tick() => {
                for line in following.poll() {
                    show(&line, json)?;
                }
            }
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        }
    }
}

fn show(line: &Line, json: bool) -> std::io::Result<()> {
    if json {
        return crate::out!("{}", crate::render::terminal_text(&line.text));
    }
    let Ok(Value::Object(v)) = serde_json::from_str::<Value>(&line.text) else {
        return crate::out!("{} {}", line.kind, crate::render::terminal_text(&line.text));
    };
    let text = |key: &str| v.get(key).and_then(Value::as_str).unwrap_or("");
    let mut fields = String::new();
    let mut message = String::new();
    if let Some(Value::Object(f)) = v.get("fields") {
        for (k, value) in f {
            let value = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if k == "message" {
                message = value;
            } else {
                fields.push_str(&format!(" {k}={value}"));
            }
        }
    }
    if let Some(Value::Array(spans)) = v.get("spans") {
        for span in spans.iter().filter_map(Value::as_object) {
            for (k, value) in span.iter().filter(|(k, _)| *k != "name") {
                fields.push_str(&format!(
                    " {k}={}",
                    value
                        .as_str()
                        .map_or_else(|| value.to_string(), str::to_string)
                ));
            }
        }
    }
    let shown = format!(
        "{} {:>5} {} {}: {message}{fields}",
        text("timestamp"),
        text("level"),
        line.kind,
        text("target"),
    );
    crate::out!("{}", crate::render::terminal_text(&shown))
}
