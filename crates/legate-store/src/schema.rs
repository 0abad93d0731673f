//! The schema and its versioned migrations.
//!
//! `PRAGMA user_version` holds how many steps of [`MIGRATIONS`] a database has had. Each step
//! runs in its own `BEGIN IMMEDIATE` transaction that re-reads the version first, so two
//! processes opening a fresh database at once apply every step exactly once. Steps are never
//! edited once released; a change is a new step at the end.

use crate::sql::{SqlContext, store_error};
use legate_core::Result;
use rusqlite::{Connection, TransactionBehavior};

/// The schema version this build writes: the number of migration steps.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// The migration steps, in order. Step `i` moves `user_version` from `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    V1,
    V2,
    V3,
    V4,
    V5,
    V6,
    V7,
    V8,
    V9_COMPARISONS,
    V10_GROUPS,
    V11_MEMORY,
    V12_DELIVERY,
    V13_POLICY,
    V14_PEERS,
    V15_GROUP_ROLES,
    V16_CALL_TASKS,
    V17_CONTINUE,
    V18_SIGN_INS,
    V19_TAP,
    V20_PLAN_ROWS,
    V21_TRACE,
    V22_GROUP_TASKS,
    V23_GROUP_NODE_TASKS,
    V24_MESSAGES_BY_CONTEXT,
];

/// Tasks, their events, and contexts.
const V1: &str = "
CREATE TABLE tasks (
    id                  TEXT PRIMARY KEY NOT NULL,
    context_id          TEXT NOT NULL,
    agent               TEXT NOT NULL,
    workspace           TEXT NOT NULL,
    root                TEXT,
    prompt              TEXT NOT NULL,
    mode                TEXT NOT NULL,
    state               TEXT NOT NULL,
    error_code          TEXT,
    error_message       TEXT,
    status_message      TEXT,
    usage               TEXT,
    result              TEXT,
    session_id          TEXT,
    timeout_secs        INTEGER NOT NULL,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    runner              TEXT,
    cancel_requested_at INTEGER
) STRICT;
CREATE INDEX tasks_state ON tasks (state);
CREATE INDEX tasks_context_id ON tasks (context_id);
CREATE INDEX tasks_created_at ON tasks (created_at);

CREATE TABLE events (
    task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq     INTEGER NOT NULL,
    at      INTEGER NOT NULL,
    type    TEXT NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (task_id, seq)
) WITHOUT ROWID, STRICT;

CREATE TABLE contexts (
    context_id   TEXT PRIMARY KEY NOT NULL,
    agent        TEXT NOT NULL,
    session_id   TEXT,
    sandbox_root TEXT,
    updated_at   INTEGER NOT NULL
) STRICT;
";

/// The model a task asked for (`NULL`: none named).
const V2: &str = "
ALTER TABLE tasks ADD COLUMN model TEXT;
";

/// Messages sent to a conversation, one row per client-chosen id, with the task that carries
/// each as the context's next turn.
const V3: &str = "
CREATE TABLE messages (
    message_id TEXT PRIMARY KEY NOT NULL,
    context_id TEXT NOT NULL,
    text       TEXT NOT NULL,
    task_id    TEXT,
    created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX messages_context_id ON messages (context_id);
";

/// The review record of each copy task (its copy, baseline, criteria, patch, verification,
/// tests and integration), as JSON the engine owns. Deleted with its task.
const V4: &str = "
CREATE TABLE reviews (
    task_id    TEXT PRIMARY KEY NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    record     TEXT NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;
";

/// The role a task plays (`legate_core::TaskRole` as JSON; `NULL`: stored before roles, an
/// implementer).
const V5: &str = "
ALTER TABLE tasks ADD COLUMN role TEXT;
";

/// The approval queue (permission requests waiting for a supervisor; answered or expired
/// once, deleted with their task) and the audit trail of every permission decision (kept
/// when its task is pruned). `scope` is the key an allow-for-task answer covers.
const V6: &str = "
CREATE TABLE approvals (
    id            TEXT PRIMARY KEY NOT NULL,
    task_id       TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    agent         TEXT NOT NULL,
    role          TEXT NOT NULL,
    tool          TEXT NOT NULL,
    options       TEXT NOT NULL,
    rule_id       TEXT,
    reason        TEXT NOT NULL,
    answerers     TEXT NOT NULL,
    scope         TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    deadline      INTEGER NOT NULL,
    state         TEXT NOT NULL,
    answer        TEXT,
    answer_reason TEXT,
    channel       TEXT,
    closed_reason TEXT,
    decided_at    INTEGER
) STRICT;
CREATE INDEX approvals_state ON approvals (state, created_at);
CREATE INDEX approvals_task_scope ON approvals (task_id, scope);

CREATE TABLE decisions (
    id          INTEGER PRIMARY KEY,
    task_id     TEXT NOT NULL,
    agent       TEXT NOT NULL,
    tool        TEXT NOT NULL,
    decider     TEXT NOT NULL,
    rule_id     TEXT,
    channel     TEXT,
    decision    TEXT NOT NULL,
    option_id   TEXT,
    reason      TEXT NOT NULL,
    approval_id TEXT,
    at          INTEGER NOT NULL
) STRICT;
CREATE INDEX decisions_task ON decisions (task_id, id);
CREATE INDEX decisions_at ON decisions (at);
CREATE INDEX decisions_approval ON decisions (approval_id);
";

/// The remote task a task is bound to (`legate_core::RemoteRef` as JSON), written only by
/// `Store::set_task_remote`.
const V7: &str = "
ALTER TABLE tasks ADD COLUMN remote TEXT;
";

/// What a task was given besides its prompt (`legate_core::TaskControls` as JSON), written
/// once when the task is inserted.
const V8: &str = "
ALTER TABLE tasks ADD COLUMN controls TEXT;
";

/// Comparisons: several read-only reviews of one version (issue 16). One row per comparison,
/// its document (source, hashes, targets, task ids, start errors) kept as opaque JSON the
/// engine owns; written once, never updated.
const V9_COMPARISONS: &str = "
CREATE TABLE comparisons (
    id TEXT PRIMARY KEY NOT NULL,
    source_task_id TEXT NOT NULL,
    record TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX comparisons_by_source ON comparisons (source_task_id);
";

/// Groups and workflows (issue 16): each group's canonical definition and hash, state, pause
/// reason and driving runner; each node's state, bound task and checkpoint.
const V10_GROUPS: &str = "
CREATE TABLE groups (
    group_id          TEXT PRIMARY KEY NOT NULL,
    definition        TEXT NOT NULL,
    definition_sha256 TEXT NOT NULL,
    title             TEXT,
    state             TEXT NOT NULL,
    pause_reason      TEXT,
    pause_message     TEXT,
    runner            TEXT,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
) STRICT;
CREATE INDEX groups_state ON groups (state);

CREATE TABLE group_nodes (
    group_id   TEXT NOT NULL REFERENCES groups (group_id) ON DELETE CASCADE,
    node_id    TEXT NOT NULL,
    position   INTEGER NOT NULL,
    state      TEXT NOT NULL,
    task_id    TEXT,
    error_code TEXT,
    checkpoint TEXT,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (group_id, node_id)
) STRICT;
";

/// Private memory per project and specialist, and the snapshots tasks received (issue 17):
/// one entry per canonical git root and specialist id (its text, the text's sha256 and UTF-8
/// size), and the texts each task was given, by task and position (kept when the entry is
/// replaced or removed).
const V11_MEMORY: &str = "
CREATE TABLE memory_entries (
    project    TEXT NOT NULL,
    specialist TEXT NOT NULL,
    sha256     TEXT NOT NULL,
    bytes      INTEGER NOT NULL,
    text       TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (project, specialist)
) WITHOUT ROWID, STRICT;

CREATE TABLE memory_snapshots (
    task_id    TEXT NOT NULL,
    position   INTEGER NOT NULL,
    specialist TEXT NOT NULL,
    sha256     TEXT NOT NULL,
    bytes      INTEGER NOT NULL,
    text       TEXT NOT NULL,
    PRIMARY KEY (task_id, position)
) WITHOUT ROWID, STRICT;
";

/// Public messages of tasks (derived from their events on demand: `derived_through` is the
/// last event read), and the artifacts collected from their workspaces (issue 17).
const V12_DELIVERY: &str = "
CREATE TABLE public_messages (
    task_id       TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq           INTEGER NOT NULL,
    kind          TEXT NOT NULL,
    origin        TEXT NOT NULL,
    model         TEXT,
    at            INTEGER NOT NULL,
    text          TEXT NOT NULL,
    event_seq     INTEGER NOT NULL,
    result_sha256 TEXT,
    result_length INTEGER,
    code          TEXT,
    PRIMARY KEY (task_id, seq)
) STRICT;

CREATE TABLE public_message_marks (
    task_id         TEXT PRIMARY KEY NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    derived_through INTEGER NOT NULL,
    last_seq        INTEGER NOT NULL
) STRICT;

CREATE TABLE artifacts (
    task_id      TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    state        TEXT NOT NULL,
    bytes        INTEGER,
    sha256       TEXT,
    reason       TEXT,
    collected_at INTEGER NOT NULL,
    PRIMARY KEY (task_id, name)
) STRICT;
";

/// The test sandbox policy and other caller-set policies (issue 17): one JSON document per
/// policy name, with the sha256 a replacement must name (compare-and-set).
const V13_POLICY: &str = "
CREATE TABLE policies (
    name        TEXT PRIMARY KEY NOT NULL,
    document    TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    updated_at  INTEGER NOT NULL
);
";

/// Peer messages between the nodes of a group, and their receipts (issue 16): one row per
/// group and agent-chosen message id; `seq` orders a group's receipts and is their cursor.
/// No foreign key to the groups table (another step owns it); rows are never deleted, so a
/// `seq` is never reused.
const V14_PEERS: &str = "
CREATE TABLE peer_messages (
    seq         INTEGER PRIMARY KEY,
    group_id    TEXT NOT NULL,
    message_id  TEXT NOT NULL,
    from_node   TEXT NOT NULL,
    to_node     TEXT NOT NULL,
    text        TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('queued', 'sent')),
    source_task TEXT,
    task_id     TEXT,
    created_at  INTEGER NOT NULL,
    sent_at     INTEGER,
    UNIQUE (group_id, message_id)
) STRICT;
CREATE INDEX peer_messages_to ON peer_messages (group_id, to_node, state, seq);
CREATE INDEX peer_messages_from ON peer_messages (group_id, from_node);
";

/// The sha256 of the role definitions a group's nodes use, recorded when it first starts
/// (`GROUP_PROFILE_CHANGED` when they differ later).
const V15_GROUP_ROLES: &str = "
ALTER TABLE groups ADD COLUMN roles_sha256 TEXT;
";

/// Tool calls answered as MCP tasks (issue 30): one row per call, keyed by the id the caller
/// follows (a task, continuation, group or comparison id, or an `op-…` id for `test` and
/// `integrate`, which the engine runs in the background). `answer` is the tool's direct
/// answer as JSON the engine owns; `state` is the background work's (`answered` for a call
/// whose work the engine tracks elsewhere); `runner` names the process running an op.
const V16_CALL_TASKS: &str = "
CREATE TABLE call_tasks (
    id          TEXT PRIMARY KEY NOT NULL,
    tool        TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('answered', 'running', 'completed', 'failed', 'canceled')),
    answer      TEXT,
    is_error    INTEGER NOT NULL DEFAULT 0,
    runner      TEXT,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
) STRICT;
";

/// Whether the agent that opened a context's session announced it can continue it
/// (`session/resume` or `session/load`), recorded when the session opened: a `continue`
/// after a restart decides on it (NULL: not recorded, a session opened before this).
/// A task cut by a restart has at most one continuation (`controls.continuedFrom`): the index
/// decides between two processes continuing it at once.
const V17_CONTINUE: &str = "
ALTER TABLE contexts ADD COLUMN resumable INTEGER;
CREATE UNIQUE INDEX tasks_continued_from ON tasks (json_extract(controls, '$.continuedFrom'))
    WHERE controls IS NOT NULL AND json_extract(controls, '$.continuedFrom') IS NOT NULL;
";

/// What the dashboard's sign-in remembers across restarts (issue 29, finding 8): one-time
/// codes already redeemed (`code`, by nonce) and sessions signed out (`session`, by id), each
/// until it would have expired anyway.
const V18_SIGN_INS: &str = "
CREATE TABLE sign_in_spent (
    kind        TEXT NOT NULL CHECK (kind IN ('code', 'session')),
    id          TEXT NOT NULL,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (kind, id)
) STRICT, WITHOUT ROWID;
CREATE INDEX sign_in_spent_expiry ON sign_in_spent (expires_at);
";

/// The wire tap (issue 34): a tapped task's protocol frames, redacted and bounded before
/// they are stored, numbered from 1 per task like its events, and gone with their task.
/// `wire_bytes` is a frame's size as sent; for a `marker` (the cap was reached) the bytes
/// dropped, and `dropped` the frames dropped.
const V19_TAP: &str = "
CREATE TABLE tap_frames (
    task_id    TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    at         INTEGER NOT NULL,
    direction  TEXT NOT NULL CHECK (direction IN ('to-agent', 'from-agent', 'marker')),
    protocol   TEXT NOT NULL CHECK (protocol IN ('acp', 'agy', 'a2a')),
    frame      TEXT NOT NULL,
    wire_bytes INTEGER NOT NULL,
    truncated  INTEGER NOT NULL DEFAULT 0,
    dropped    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (task_id, seq)
) WITHOUT ROWID, STRICT;
";

/// Each task's plan rows, in order: plans are stored as what changed since the previous one
/// and rebuilt from their keyframe, so appenders and readers find them without a scan. Older
/// releases cannot read such rows, and refuse a store of this version.
const V20_PLAN_ROWS: &str = "
CREATE INDEX events_plans ON events (task_id, seq) WHERE type = 'plan';
";

/// A task's W3C trace context (issue 34), kept from its first turn so that a reply, or a turn
/// re-attached after a restart, continues the task's trace.
const V21_TRACE: &str = "
ALTER TABLE tasks ADD COLUMN traceparent TEXT;
ALTER TABLE tasks ADD COLUMN tracestate TEXT;
";

/// A group's tasks by the group their controls name (issue 33): a group's driver reads them
/// at every step, which without this scanned every task row and parsed its controls, so a
/// step grew with the store instead of the group. The expression is `group_tasks`'s own, and
/// only tasks with controls are in the index.
const V22_GROUP_TASKS: &str = "
CREATE INDEX tasks_group ON tasks (json_extract(controls, '$.group.groupId'), created_at)
    WHERE controls IS NOT NULL;
";

/// A group's tasks by the node their controls name too (issue 33): a group's scheduler reads
/// the tasks of its open nodes at every step (`group_node_tasks`), which through
/// `tasks_group` alone fetched every task row of the group to tell its node, so a step still
/// grew with everything the group ran. The expressions are `group_node_tasks`'s own.
const V23_GROUP_NODE_TASKS: &str = "
CREATE INDEX tasks_group_node ON tasks (
    json_extract(controls, '$.group.groupId'),
    json_extract(controls, '$.group.nodeId'),
    created_at
) WHERE controls IS NOT NULL;
";

/// A message id is the caller's within one conversation, not across all of them: one key
/// across every context let a caller of one front (an A2A peer choosing predictable ids) take
/// an id another front's caller would send later, to a conversation it cannot even reach,
/// and make that send `MESSAGE_ID_CONFLICT`. Rows are kept as they were.
const V24_MESSAGES_BY_CONTEXT: &str = "
CREATE TABLE messages_by_context (
    context_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    text       TEXT NOT NULL,
    task_id    TEXT,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (context_id, message_id)
) STRICT;
INSERT INTO messages_by_context (context_id, message_id, text, task_id, created_at)
    SELECT context_id, message_id, text, task_id, created_at FROM messages;
DROP TABLE messages;
ALTER TABLE messages_by_context RENAME TO messages;
";

fn user_version(conn: &Connection) -> Result<u32> {
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .ctx("read the schema version")?;
    u32::try_from(v).map_err(|_| store_error("the database has an invalid schema version."))
}

fn too_new(found: u32) -> legate_core::Error {
    store_error(format!(
        "the database has schema version {found}, newer than the {SCHEMA_VERSION} this Legate knows; upgrade Legate."
    ))
}

/// Applies every missing step. Cheap when the schema is current: one read, no write lock.
pub(crate) fn migrate(conn: &mut Connection) -> Result<()> {
    let current = user_version(conn)?;
    if current > SCHEMA_VERSION {
        return Err(too_new(current));
    }
    if current == SCHEMA_VERSION {
        return Ok(());
    }
    loop {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .ctx("start a migration")?;
        let version = user_version(&tx)?;
        if version > SCHEMA_VERSION {
            return Err(too_new(version));
        }
        let Some(step) = MIGRATIONS.get(version as usize) else {
            return Ok(());
        };
        tx.execute_batch(step)
            .ctx(&format!("apply migration {}", version + 1))?;
        tx.pragma_update(None, "user_version", version + 1)
            .ctx("record the schema version")?;
        tx.commit().ctx("commit a migration")?;
        tracing::debug!(version = version + 1, "store schema migrated");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use legate_core::ErrorCode;

    #[test]
    fn migrating_twice_is_a_no_op() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        assert_eq!(user_version(&conn).unwrap(), SCHEMA_VERSION);
        migrate(&mut conn).unwrap();
        assert_eq!(user_version(&conn).unwrap(), SCHEMA_VERSION);
        let tables: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        // Base 7; comparisons (V9); groups, group_nodes (V10); memory_entries,
        // memory_snapshots (V11); public messages, their mark and artifacts (V12); policies
        // (V13); peer_messages (V14); call_tasks (V16); sign_in_spent (V18); tap_frames (V19).
        assert_eq!(tables, 20);
    }

    /// Messages stored under the one key across contexts keep their rows, and the same id
    /// is then free in another context.
    #[test]
    fn messages_keep_their_rows_when_their_ids_become_per_context() {
        let mut conn = Connection::open_in_memory().unwrap();
        for step in &MIGRATIONS[..23] {
            conn.execute_batch(step).unwrap();
        }
        conn.pragma_update(None, "user_version", 23).unwrap();
        conn.execute(
            "INSERT INTO messages (message_id, context_id, text, task_id, created_at) \
             VALUES ('m-1', 'c-1', 'hello', 't-1', 7)",
            [],
        )
        .unwrap();
        migrate(&mut conn).unwrap();
        let row: (String, String, String, Option<String>, i64) = conn
            .query_row(
                "SELECT context_id, message_id, text, task_id, created_at FROM messages",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )
            .unwrap();
        assert_eq!(
            row,
            (
                "c-1".into(),
                "m-1".into(),
                "hello".into(),
                Some("t-1".into()),
                7
            )
        );
        conn.execute(
            "INSERT INTO messages (message_id, context_id, text, created_at) \
             VALUES ('m-1', 'c-2', 'other', 8)",
            [],
        )
        .unwrap();
        let again = conn.execute(
            "INSERT INTO messages (message_id, context_id, text, created_at) \
             VALUES ('m-1', 'c-1', 'again', 9)",
            [],
        );
        assert!(again.is_err());
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        let err = migrate(&mut conn).unwrap_err();
        assert_eq!(err.code, ErrorCode::StoreError);
        assert!(err.message.contains("newer"), "{}", err.message);
    }
}
