//! The scripted agent as a supervising agent: the verdict it gives Legate's judge prompt,
//! chosen at start with [`JUDGE_ENV`].
//!
//! This module owns those chosen answers, good and bad, so the engine's judge can be tested
//! against each: a valid `allow` or `deny`, text that is no JSON, an object with a field too
//! many, no answer at all, an attempt to use a tool, and a judge that remembers (it writes
//! into its `HOME` and denies once it finds what it wrote). Every valid verdict says the model
//! the session runs with. It never acts on the request it is shown (it only ever reads the
//! header line) and writes nothing but `remember`'s note in its own `HOME`.

use agent_client_protocol::v1::schema::{
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    SessionUpdate, ToolCall, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use legate_revisor::{Directed, DirectiveContext};
use serde_json::json;

/// The environment variable that picks a [`JudgeAnswer`].
pub const JUDGE_ENV: &str = "LEGATE_TESTKIT_JUDGE";

/// The environment variable naming a file whose content picks the [`JudgeAnswer`] instead,
/// read when the agent starts (a judge starts for each question, so a test may change its
/// answer between questions).
pub const JUDGE_FILE_ENV: &str = "LEGATE_TESTKIT_JUDGE_FILE";

/// What `garbage` answers: no JSON at all.
pub const GARBAGE_ANSWER: &str = "Looks fine to me, allow it!";

/// How the scripted agent answers a judge prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JudgeAnswer {
    /// `{"decision":"allow","reason":…}`.
    Allow,
    /// `{"decision":"deny","reason":…}`.
    Deny,
    /// [`GARBAGE_ANSWER`].
    Garbage,
    /// `{"decision":"allow","reason":…,"scope":"forever"}`: a field the schema lacks.
    Extra,
    /// Never answers (the judge's own timeout ends it).
    Hang,
    /// Asks permission for an edit first; answers `allow` only if that was refused, else
    /// `deny` (so a judge that was let use a tool is visible in the audit).
    Tool,
    /// Answers `deny` when [`MEMORY_FILE`] is in its `HOME` (something an earlier session
    /// wrote there), else writes it and answers `allow`.
    Remember,
}

/// What [`JudgeAnswer::Remember`] writes into its `HOME`.
pub const MEMORY_FILE: &str = "judge-memory.txt";

impl JudgeAnswer {
    /// Parses a [`JUDGE_ENV`] value; empty is `None` (revisor's own rule).
    ///
    /// # Errors
    /// An unknown value.
    pub fn parse(value: &str) -> Result<Option<Self>, String> {
        Ok(Some(match value.trim() {
            "" => return Ok(None),
            "allow" => Self::Allow,
            "deny" => Self::Deny,
            "garbage" => Self::Garbage,
            "extra" => Self::Extra,
            "hang" => Self::Hang,
            "tool" => Self::Tool,
            "remember" => Self::Remember,
            other => return Err(format!("unknown {JUDGE_ENV} value {other:?}")),
        }))
    }

    /// The answer the environment picks: [`JUDGE_FILE_ENV`]'s file, else [`JUDGE_ENV`].
    ///
    /// # Errors
    /// An unknown value.
    pub fn from_env() -> Result<Option<Self>, String> {
        if let Some(file) = std::env::var_os(JUDGE_FILE_ENV) {
            let chosen = std::fs::read_to_string(&file)
                .map_err(|e| format!("{JUDGE_FILE_ENV} {}: {e}", file.to_string_lossy()))?;
            return Self::parse(&chosen);
        }
        Self::parse(&std::env::var(JUDGE_ENV).unwrap_or_default())
    }
}

/// How many entries `context`'s working directory holds (`usize::MAX` when unreadable).
fn entries(context: &DirectiveContext) -> usize {
    std::fs::read_dir(context.cwd()).map_or(usize::MAX, Iterator::count)
}

fn verdict(decision: &str, why: &str, context: &DirectiveContext) -> String {
    json!({
        "decision": decision,
        "reason": format!(
            "scripted judge: {why}; its directory holds {} entries; model {}",
            entries(context),
            context.model()
        ),
    })
    .to_string()
}

/// Answers one judge prompt as `judge` says, then ends the turn.
pub async fn perform(judge: JudgeAnswer, context: DirectiveContext) -> Directed {
    let text = match judge {
        JudgeAnswer::Allow => verdict("allow", "allow as told", &context),
        JudgeAnswer::Deny => verdict("deny", "deny as told", &context),
        JudgeAnswer::Garbage => GARBAGE_ANSWER.to_owned(),
        JudgeAnswer::Extra => json!({
            "decision": "allow",
            "reason": "allow, and for ever",
            "scope": "forever",
        })
        .to_string(),
        JudgeAnswer::Hang => return std::future::pending().await,
        JudgeAnswer::Remember => remember(&context),
        JudgeAnswer::Tool => {
            if try_a_tool(&context).await {
                verdict("deny", "my edit was allowed", &context)
            } else {
                verdict("allow", "my edit was refused", &context)
            }
        }
    };
    let _ = context.send_message_chunk(&text);
    Directed::EndTurn(agent_client_protocol::v1::schema::StopReason::EndTurn)
}

/// [`JudgeAnswer::Remember`]'s verdict.
fn remember(context: &DirectiveContext) -> String {
    let Some(home) = std::env::var_os("HOME").map(std::path::PathBuf::from) else {
        return verdict("deny", "no HOME", context);
    };
    let note = home.join(MEMORY_FILE);
    if let Ok(earlier) = std::fs::read_to_string(&note) {
        return verdict("deny", &format!("I remember: {}", earlier.trim()), context);
    }
    match std::fs::write(&note, "an earlier question") {
        Ok(()) => verdict("allow", "nothing remembered; noted this question", context),
        Err(e) => verdict("deny", &format!("could not write my note: {e}"), context),
    }
}

/// Asks permission to edit `judged.txt`; whether an allowing option was selected.
async fn try_a_tool(context: &DirectiveContext) -> bool {
    let id = "judge-edit-1";
    let path = context.cwd().join("judged.txt");
    let _ = context.send_update(SessionUpdate::ToolCall(
        ToolCall::new(id, "Write judged.txt")
            .kind(ToolKind::Edit)
            .status(ToolCallStatus::Pending)
            .locations(vec![
                agent_client_protocol::v1::schema::ToolCallLocation::new(path),
            ]),
    ));
    let request = RequestPermissionRequest::new(
        context.session_id().clone(),
        ToolCallUpdate::new(id, ToolCallUpdateFields::new().kind(ToolKind::Edit)),
        vec![
            PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce),
            PermissionOption::new("reject", "Reject", PermissionOptionKind::RejectOnce),
        ],
    );
    match context
        .connection()
        .send_request(request)
        .block_task()
        .await
    {
        Ok(response) => matches!(
            response.outcome,
            RequestPermissionOutcome::Selected(selected) if selected.option_id.0.as_ref() == "allow"
        ),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_answer_and_refuses_others() {
        assert_eq!(JudgeAnswer::parse(""), Ok(None));
        assert_eq!(JudgeAnswer::parse("allow"), Ok(Some(JudgeAnswer::Allow)));
        assert_eq!(JudgeAnswer::parse("tool"), Ok(Some(JudgeAnswer::Tool)));
        assert_eq!(
            JudgeAnswer::parse("remember"),
            Ok(Some(JudgeAnswer::Remember))
        );
        assert!(JudgeAnswer::parse("maybe").is_err());
    }
}
