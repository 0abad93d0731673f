//! The revisor: Legate's built-in ACP agent with no model.
//!
//! Revisor speaks the Agent Client Protocol (v1) like any other agent Legate drives, but
//! instead of a language model it follows a tiny, deterministic instruction language. It
//! does small real work (writes, edits, deletes, moves, commands) and asks permission
//! exactly the way Claude's adapter does, so Legate's whole pipeline (supervisor, workspace,
//! store, fronts) runs offline and in tests. `legate agent revisor` runs it on stdio.
//!
//! This crate owns the revisor agent and nothing else. It never talks to a network, never
//! acts without the client's permission (reads excepted), logs only through `tracing`
//! (which the binary sends to stderr; stdout carries the protocol), and holds no test-only
//! behaviour: embedders extend it through [`DirectiveHook`].
//!
//! # Serving
//!
//! - [`serve_stdio`] speaks ACP on stdin/stdout.
//! - [`serve`] speaks ACP over any pair of `futures` byte streams (wrap tokio streams with
//!   `tokio_util::compat`), and [`serve_with`] does the same with [`RevisorOptions`].
//! - [`serve_transport`] serves on any SDK transport (for example an in-process `Channel`).
//!
//! All of them must run inside a tokio runtime with I/O and time enabled (commands run
//! through `tokio::process`). They return when the client closes the connection.
//!
//! # The protocol surface
//!
//! - `initialize`: answers protocol version 1, `agentInfo` `{name: "revisor", version: <crate
//!   version>}` and `agentCapabilities.loadSession = true`. It records the client's
//!   capabilities: with `fs.readTextFile` revisor reads through `fs/read_text_file`, with
//!   `fs.writeTextFile` it writes through `fs/write_text_file`; otherwise it uses the disk
//!   directly. It runs commands itself even when the client offers terminals.
//! - `session/new`: `cwd` must be absolute and an existing directory, else `invalid_params`.
//!   Answers a fresh session id and the modes `default` (asks before every change) and
//!   `plan` (refuses every change itself), current `default`.
//! - `session/load`: accepts a session id issued earlier by this process, or any well-formed
//!   id (1–128 characters of ASCII letters, digits, `-`, `_`, `.`, `:`), with a valid `cwd`.
//!   Revisor keeps no memory beyond the files on disk: loading replays no history, and a
//!   session loaded in a new process starts in mode `default`.
//! - `session/set_mode`: `default` or `plan`; anything else is `invalid_params`.
//! - `session/prompt`: runs a turn (below). Unknown session: a resource-not-found error.
//! - `session/cancel`: the running turn stops before its next step (a running command is
//!   killed, a pending permission request is abandoned) and the prompt answers
//!   `stopReason: cancelled`.
//!
//! Request ids may be numbers or strings. Malformed parameters get JSON-RPC
//! `invalid_params`; nothing panics on bad input.
//!
//! # The instruction language
//!
//! The text blocks of a prompt are joined and read line by line; blank lines are ignored.
//! A line whose first word is one of the verbs below (case-insensitive) is an
//! *instruction*; every other line belongs to the *question*. Instructions are performed in
//! order, each as a real tool call (`session/update` `tool_call`, status `pending`, with
//! `kind`, `title`, `locations` and `rawInput`). Paths are relative to the session's `cwd`
//! (absolute paths are used as written; `.` and `..` are resolved lexically). In contents,
//! `\n`, `\t`, `\r` and `\\` are escapes.
//!
//! | instruction | tool kind | asks? | effect |
//! |---|---|---|---|
//! | `write <path>: <content>` | `edit` | yes | create or overwrite the file with exactly `content` (parents created) |
//! | `append <path>: <text>` | `edit` | yes | add exactly `text` at the end (file created if missing) |
//! | `replace <path>: <old> => <new>` | `edit` | yes | replace every occurrence of `old`; fails without asking if `old` is absent |
//! | `delete <path>` | `delete` | yes | remove the file, or the directory and everything in it |
//! | `move <from> -> <to>` | `move` | yes | rename; `locations` are `[from, to]` |
//! | `run <command>` | `execute` | yes | `sh -c <command>` in `cwd`, 60 s timeout, output (stdout then stderr) bounded to 8 KiB; non-zero exit → `failed`. `title` is the command, `rawInput` is `{command, description}` |
//! | `fetch <url>` | `fetch` | yes | if allowed, fails: revisor has no network |
//! | `read <path>` | `read` | no | reads the file and quotes its first 20 lines in the answer |
//! | `recite <path>` | none | no | sends the whole file back in pieces of 5 bytes, each as an answer chunk then a thought chunk |
//! | `plan: <text>` | `switch_mode` | yes | proposes leaving plan mode (see below) |
//! | `think: <text>` | — | no | sends the text as an `agent_thought_chunk` |
//! | `mode <id>` | — | no | switches the session to `default`, `plan` or `acceptEdits` and sends `current_mode_update` |
//!
//! **Asking.** An instruction that changes something sends `session/request_permission`
//! with Claude's options: `allow_always` "Always Allow" (`allow_always`), `allow` "Allow"
//! (`allow_once`), `reject` "Reject" (`reject_once`). Edits carry a `diff` (`oldText` null for a
//! new file). If allowed, revisor does it and sends `tool_call_update` `completed` with a
//! short text. If rejected or cancelled, the tool call becomes `failed` with "User refused
//! permission to run tool" and the turn carries on with the next line (as Claude does),
//! unless the turn itself was cancelled.
//!
//! **Plan mode.** In mode `plan`, `write`, `append`, `replace`, `delete`, `move` and `run`
//! are refused by revisor itself, without asking: the tool call fails with "revisor is in
//! plan mode". `read`, `fetch`, `think`, `mode` and `plan:` still work. The mode
//! `acceptEdits` is only recorded: revisor keeps asking in it.
//!
//! **`plan: <text>`** always proposes leaving plan mode, whatever the current mode (so the
//! supervisor's `switch_mode` handling can be tested from any mode). The tool call has
//! `kind: switch_mode` and `rawInput: {plan: text}`; the options are `exit-plan-default`
//! "Yes, and manually approve edits" (`allow_once`), `exit-plan-accept-edits` "Yes, and
//! auto-accept edits" (`allow_always`) and `reject` "No, keep planning" (`reject_once`). The
//! first sends `current_mode_update` `default`, the second `acceptEdits`; a rejection (or a
//! cancelled request) ends the turn at once with stop reason `cancelled`, as Claude does.
//!
//! **The answer.** Whatever the question says, the answer describes `cwd` deterministically:
//! what each step did, the quotes of `read`, the number of files and total bytes (walking
//! `cwd`, skipping `.git`, not following links, at most 10,000 files), the five largest
//! files, and for each word of the question of three or more characters that names a file
//! (by path, file name or stem, case-insensitive), its line count and first five lines.
//!
//! **Turn shape.** Every turn begins with a `plan` update listing the steps (one entry per
//! instruction, then "Answer") and re-sends it as each entry becomes `in_progress` and
//! `completed`. The answer streams as one `agent_message_chunk` per line. The turn then
//! sends a `usage_update` (`used` = whitespace-separated words of this session's prompts and
//! answers so far, `size` = 200000) and ends with `end_turn`, its answer reporting zero
//! tokens (`usage`: revisor runs no model, so what it consumed is known, and is nothing).
//!
//! **Reports.** A prompt holding Legate's report contract (a line `Legate report contract:
//! planner` or `… reviewer`, then the rules and a fenced schema, all skipped as input)
//! is answered with what was done, then a deterministic plan or review in a ```` ```json ````
//! fence instead of the directory's description (see [`report`]): a plan names real files
//! of `cwd`, a review cites real lines of them with literal quotes.
//!
//! **Directives.** With a [`DirectiveHook`] installed, every line is first offered to the
//! hook; a claimed line becomes a step (plan entry = the line) the hook performs, and the
//! hook may end the turn early. Revisor itself defines no directives.
//!
//! **As a supervising agent.** A prompt whose first line is [`judge::JUDGE_HEADER`] (Legate's
//! judge prompt, `[supervision] agent = "…"` naming a revisor agent) is not read as
//! instructions at all: revisor answers one JSON object, `{"decision":"allow",…}` for a tool
//! call of kind `read` and `{"decision":"deny",…}` for anything else, and ends the turn. A
//! hook that claims the header line answers in its place.

mod agent;
mod hook;
pub mod instruction;
pub mod judge;
pub mod report;
mod shell;
mod summary;
mod turn;

use std::sync::Arc;

use agent_client_protocol::{Agent, ByteStreams, ConnectTo, Error, Stdio};
use futures::{AsyncRead, AsyncWrite};

pub use agent::{MODEL_CONFIG_ID, MODELS};
pub use hook::{Directed, DirectiveContext, DirectiveHook, SessionHook};
pub use turn::{CONTEXT_WINDOW, OUTPUT_LIMIT, PLAN_MODE_REFUSAL, READ_LINES, REFUSED, RUN_TIMEOUT};

/// How to run revisor.
#[derive(Debug, Clone, Default)]
pub struct RevisorOptions {
    /// Lines this hook claims are performed by it instead of revisor (see [`DirectiveHook`]).
    pub directive: Option<Arc<dyn DirectiveHook>>,
    /// The `agentInfo` name and version `initialize` announces instead of revisor's own
    /// (`revisor`, this crate's version): a test kit playing another adapter's version.
    pub agent_info: Option<(String, String)>,
    /// Who keeps sessions across processes, when someone does (see [`SessionHook`]).
    pub sessions: Option<Arc<dyn SessionHook>>,
}

/// Serves revisor on stdin/stdout until the client closes stdin.
///
/// # Errors
/// When the transport fails.
pub async fn serve_stdio() -> Result<(), Error> {
    serve_stdio_with(RevisorOptions::default()).await
}

/// [`serve_stdio`] with options.
///
/// # Errors
/// When the transport fails.
pub async fn serve_stdio_with(options: RevisorOptions) -> Result<(), Error> {
    serve_transport(options, Stdio::new()).await
}

/// Serves revisor over a pair of byte streams: it reads requests from `reader` and writes
/// responses and notifications to `writer`, one JSON-RPC message per line.
///
/// # Errors
/// When the transport fails.
pub async fn serve<R, W>(reader: R, writer: W) -> Result<(), Error>
where
    R: AsyncRead + Send + 'static,
    W: AsyncWrite + Send + 'static,
{
    serve_with(reader, writer, RevisorOptions::default()).await
}

/// [`serve`] with options.
///
/// # Errors
/// When the transport fails.
pub async fn serve_with<R, W>(reader: R, writer: W, options: RevisorOptions) -> Result<(), Error>
where
    R: AsyncRead + Send + 'static,
    W: AsyncWrite + Send + 'static,
{
    serve_transport(options, ByteStreams::new(writer, reader)).await
}

/// Serves revisor on any SDK transport until the client goes away.
///
/// # Errors
/// When the transport fails.
pub async fn serve_transport(
    options: RevisorOptions,
    transport: impl ConnectTo<Agent> + 'static,
) -> Result<(), Error> {
    agent::run(options, transport).await
}
