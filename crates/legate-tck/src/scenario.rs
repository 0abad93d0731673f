//! The scenarios: which behaviour a message id selects, and what each behaviour says.
//!
//! This module owns the prefix table and nothing else: it is pure (no I/O, no protocol), so
//! the mapping can be tested on its own. The prefixes are the ones the A2A TCK (`a2a-tck`,
//! branch `1.0-dev`, `scenarios/*.feature`) puts at the start of its `messageId`s, plus a few
//! of Legate's own (`tck-fail-task`, `tck-long-running`) for states the TCK reaches otherwise.

use std::time::Duration;

/// The bytes of the file the file scenarios hand over (`tck`), base64.
pub const FILE_BYTES_BASE64: &str = "dGNr";
/// The name of that file, and of the linked one.
pub const FILE_NAME: &str = "output.txt";
/// The media type of both.
pub const FILE_MEDIA_TYPE: &str = "text/plain";
/// Where the linked file is.
pub const FILE_URL: &str = "https://example.com/output.txt";
/// The structured value the data scenario hands over.
pub const DATA_JSON: &str = r#"{"key": "value", "count": 42}"#;
/// What the agent says when it asks for input.
pub const INPUT_QUESTION: &str = "The TCK profile needs more input: reply into this task.";
/// What the agent says when it refuses a task.
pub const REJECTION: &str = "The TCK profile rejects this task.";
/// The error message of a failed turn.
pub const FAILURE: &str = "the TCK profile fails this task on purpose";
/// How long `test-resubscribe-message-id` works before it completes (twice the TCK's
/// streaming timeout of 2 s).
pub const RESUBSCRIBE_WORK: Duration = Duration::from_secs(4);
/// How long `tck-long-running` works before it completes, unless canceled.
pub const LONG_RUNNING_WORK: Duration = Duration::from_secs(300);

/// What the agent does with one prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Behaviour {
    /// Sends these message chunks, in order, and ends the turn (`end_turn`): the task
    /// completes with their concatenation as its answer. No chunks: an empty answer.
    Answer(&'static [&'static str]),
    /// Says this text and ends the turn saying the answer is a direct message (`end_turn`
    /// with `_meta.legate.directMessage`): the A2A front answers a bare `Message`.
    DirectMessage(&'static str),
    /// Hands over the file [`FILE_NAME`] ([`FILE_MEDIA_TYPE`], bytes [`FILE_BYTES_BASE64`])
    /// as an embedded blob resource, and ends the turn.
    File,
    /// Hands over a link to [`FILE_URL`] (a `resource_link`), and ends the turn.
    FileUrl,
    /// Hands over [`DATA_JSON`] as an embedded `application/json` text resource, and ends the
    /// turn.
    Data,
    /// Says [`INPUT_QUESTION`] and ends the turn asking for input (`end_turn` with
    /// `_meta.legate.inputRequired`): the task waits for a reply.
    InputRequired,
    /// Says [`REJECTION`] and ends the turn with stop reason `refusal`: the task is
    /// `rejected`.
    Reject,
    /// Answers `session/prompt` with an error ([`FAILURE`]): the task fails.
    Fail,
    /// Works for this long (a `working` plan entry), then answers "done"; `session/cancel`
    /// stops it at once with stop reason `cancelled`.
    Work(Duration),
    /// Answers the prompt's own text (an echo) and ends the turn.
    Echo,
}

/// The prefix table, most specific first (a prefix that extends another comes before it).
const TABLE: &[(&str, Behaviour)] = &[
    ("tck-complete-task", Behaviour::Answer(&["Hello from TCK"])),
    (
        "tck-message-response",
        Behaviour::DirectMessage("Direct message response"),
    ),
    (
        "tck-artifact-text",
        Behaviour::Answer(&["Generated text content"]),
    ),
    ("tck-artifact-file-url", Behaviour::FileUrl),
    ("tck-artifact-file", Behaviour::File),
    ("tck-artifact-data", Behaviour::Data),
    ("tck-input-required", Behaviour::InputRequired),
    ("tck-reject-task", Behaviour::Reject),
    ("tck-fail-task", Behaviour::Fail),
    (
        "tck-stream-artifact-text",
        Behaviour::Answer(&["Streamed text content"]),
    ),
    ("tck-stream-artifact-file", Behaviour::File),
    (
        "tck-stream-artifact-chunked",
        Behaviour::Answer(&["chunk-1 ", "chunk-2"]),
    ),
    (
        "tck-stream-ordering-001",
        Behaviour::Answer(&["Ordered output"]),
    ),
    (
        "tck-stream-001",
        Behaviour::Answer(&["Stream hello from TCK"]),
    ),
    ("tck-stream-002", Behaviour::Answer(&[])),
    (
        "tck-stream-003",
        Behaviour::Answer(&["Stream task lifecycle"]),
    ),
    (
        "test-resubscribe-message-id",
        Behaviour::Work(RESUBSCRIBE_WORK),
    ),
    ("tck-long-running", Behaviour::Work(LONG_RUNNING_WORK)),
];

/// The behaviour `message_id` selects: the first prefix of the table it starts with, else
/// [`Behaviour::Echo`].
pub fn behaviour(message_id: &str) -> Behaviour {
    TABLE
        .iter()
        .find(|(prefix, _)| message_id.starts_with(prefix))
        .map_or(Behaviour::Echo, |(_, b)| b.clone())
}

/// The message id a prompt selects its behaviour by: the caller's (`_meta.legate.messageId`)
/// when Legate passed one, else the prompt's first word (so `legate run -a tck
/// tck-input-required` works from a shell).
pub fn selector<'a>(message_id: Option<&'a str>, prompt: &'a str) -> &'a str {
    match message_id {
        Some(id) if !id.is_empty() => id,
        _ => prompt.split_whitespace().next().unwrap_or(""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tck_prefix_selects_its_behaviour() {
        let session = "-1a2b3c4d";
        let cases = [
            ("tck-complete-task", Behaviour::Answer(&["Hello from TCK"])),
            (
                "tck-message-response",
                Behaviour::DirectMessage("Direct message response"),
            ),
            (
                "tck-artifact-text",
                Behaviour::Answer(&["Generated text content"]),
            ),
            ("tck-artifact-file", Behaviour::File),
            ("tck-artifact-file-url", Behaviour::FileUrl),
            ("tck-artifact-data", Behaviour::Data),
            ("tck-input-required", Behaviour::InputRequired),
            ("tck-reject-task", Behaviour::Reject),
            ("tck-fail-task", Behaviour::Fail),
            (
                "tck-stream-001",
                Behaviour::Answer(&["Stream hello from TCK"]),
            ),
            ("tck-stream-002", Behaviour::Answer(&[])),
            (
                "tck-stream-003",
                Behaviour::Answer(&["Stream task lifecycle"]),
            ),
            (
                "tck-stream-ordering-001",
                Behaviour::Answer(&["Ordered output"]),
            ),
            (
                "tck-stream-artifact-text",
                Behaviour::Answer(&["Streamed text content"]),
            ),
            ("tck-stream-artifact-file", Behaviour::File),
            (
                "tck-stream-artifact-chunked",
                Behaviour::Answer(&["chunk-1 ", "chunk-2"]),
            ),
            ("tck-long-running", Behaviour::Work(LONG_RUNNING_WORK)),
        ];
        for (prefix, expected) in cases {
            assert_eq!(
                behaviour(&format!("{prefix}{session}")),
                expected,
                "{prefix}"
            );
        }
        // The TCK's resubscription id has no `tck-` prefix and no session suffix.
        assert_eq!(
            behaviour("test-resubscribe-message-id"),
            Behaviour::Work(RESUBSCRIBE_WORK)
        );
    }

    #[test]
    fn a_longer_prefix_wins_over_the_shorter_one_it_extends() {
        assert_eq!(behaviour("tck-artifact-file-url-9f"), Behaviour::FileUrl);
        assert_eq!(behaviour("tck-artifact-file-9f"), Behaviour::File);
        for (i, (prefix, _)) in TABLE.iter().enumerate() {
            for (longer, _) in &TABLE[i + 1..] {
                assert!(
                    !longer.starts_with(prefix),
                    "{longer} comes after {prefix}, which it extends: it could never match"
                );
            }
        }
    }

    #[test]
    fn anything_else_is_an_echo() {
        for id in [
            "",
            "m-1",
            "tck-terminal-1a2b",
            "tck-",
            "TCK-COMPLETE-TASK",
            "x-tck-complete-task",
        ] {
            assert_eq!(behaviour(id), Behaviour::Echo, "{id:?}");
        }
    }

    #[test]
    fn without_a_message_id_the_first_word_selects() {
        assert_eq!(
            selector(Some("tck-reject-task-1"), "hello"),
            "tck-reject-task-1"
        );
        assert_eq!(
            selector(None, "  tck-input-required please"),
            "tck-input-required"
        );
        assert_eq!(selector(Some(""), "tck-fail-task"), "tck-fail-task");
        assert_eq!(selector(None, ""), "");
    }
}
