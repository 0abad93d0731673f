//! The store-backed [`RemoteLedger`]: where a remote backend records, before it relays
//! anything of a turn, which remote task the local task runs as. The reference is what a
//! later process re-attaches to after this one died (`adoption`).
//!
//! A reference is built from what a remote server said (its task id, its context id), so it
//! is hostile input: this module refuses one that is empty, oversized or carries control
//! characters (`REMOTE_PROTOCOL_ERROR`, never echoing the value), and one for a task that
//! already ended. It never reaches the network and never decides a task's state.

use legate_backend::RemoteLedger;
use legate_core::{Error, ErrorCode, RemoteRef, Result, TaskId};
use legate_store::Store;

/// The longest remote task or context id recorded, in bytes (A2A ids are UUIDs in practice).
pub const MAX_REMOTE_ID_BYTES: usize = 256;

/// The longest endpoint URL recorded, in bytes.
pub const MAX_REMOTE_URL_BYTES: usize = 2048;

/// The longest binding name recorded, in bytes (`JSONRPC`, `HTTP+JSON`).
pub const MAX_BINDING_BYTES: usize = 32;

/// Records remote bindings in the engine's store (`Store::set_task_remote`).
#[derive(Debug, Clone)]
pub(crate) struct StoreLedger {
    store: Store,
}

impl StoreLedger {
    pub(crate) fn new(store: Store) -> Self {
        Self { store }
    }
}

impl RemoteLedger for StoreLedger {
    fn record(&self, task: &TaskId, remote: &RemoteRef) -> Result<()> {
        check(remote)?;
        match self.store.task_runner(task)? {
            Some((state, _)) if !state.is_terminal() => {}
            Some((state, _)) => {
                return Err(Error::new(
                    ErrorCode::Internal,
                    format!("task {task} already ended ({state}); its remote task is not recorded"),
                ));
            }
            None => {
                return Err(Error::new(
                    ErrorCode::TaskNotFound,
                    format!("no task has the id {task}"),
                ));
            }
        }
        self.store.set_task_remote(task, remote)?;
        tracing::info!(task = %task, remote_task = %remote.task_id, binding = %remote.binding, "task bound to its remote task");
        Ok(())
    }
}

/// Whether `remote` may be stored and shown: every field bounded, non-empty where required,
/// and free of control characters (it is printed by `legate show`).
pub(crate) fn check(remote: &RemoteRef) -> Result<()> {
    field("task id", &remote.task_id, MAX_REMOTE_ID_BYTES)?;
    field("endpoint URL", &remote.url, MAX_REMOTE_URL_BYTES)?;
    field("binding", &remote.binding, MAX_BINDING_BYTES)?;
    if let Some(context) = &remote.context_id {
        field("context id", context, MAX_REMOTE_ID_BYTES)?;
    }
    Ok(())
}

fn field(what: &str, value: &str, max: usize) -> Result<()> {
    let problem = if value.is_empty() {
        Some("is empty".to_string())
    } else if value.len() > max {
        Some(format!("is longer than {max} bytes"))
    } else if value.chars().any(char::is_control) {
        Some("contains control characters".to_string())
    } else {
        None
    };
    match problem {
        Some(p) => Err(Error::new(
            ErrorCode::RemoteProtocolError,
            format!("the remote server's {what} {p}; the task cannot be bound to it"),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use legate_core::{Task, TaskState};
    use proptest::prelude::*;

    fn reference(task_id: &str) -> RemoteRef {
        RemoteRef {
            url: "http://127.0.0.1:9/a2a".into(),
            binding: "JSONRPC".into(),
            task_id: task_id.into(),
            context_id: Some("ctx-1".into()),
        }
    }

    #[test]
    fn a_hostile_reference_is_refused_and_a_good_one_stored() {
        let store = Store::open_in_memory().unwrap();
        let task = Task::new("t1", "c", "remote", "p");
        store
            .insert_task(
                &task,
                &legate_core::EventKind::Status {
                    state: TaskState::Working,
                    message: None,
                    error: None,
                },
            )
            .unwrap();
        let ledger = StoreLedger::new(store.clone());
        for bad in [
            String::new(),
            "x".repeat(MAX_REMOTE_ID_BYTES + 1),
            "id\u{1b}[2J".to_string(),
            "two\nlines".to_string(),
        ] {
            let err = ledger.record(&task.id, &reference(&bad)).unwrap_err();
            assert_eq!(err.code, ErrorCode::RemoteProtocolError);
            assert!(!err.message.contains('\u{1b}'), "{}", err.message);
        }
        assert_eq!(store.task(&task.id).unwrap().unwrap().remote, None);
        let good = reference("remote-task-1");
        ledger.record(&task.id, &good).unwrap();
        assert_eq!(store.task(&task.id).unwrap().unwrap().remote, Some(good));
        let err = ledger
            .record(&TaskId("nope".into()), &reference("r"))
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::TaskNotFound);
    }

    #[test]
    fn an_ended_task_is_never_bound() {
        let store = Store::open_in_memory().unwrap();
        let mut task = Task::new("t1", "c", "remote", "p");
        task.state = TaskState::Completed;
        store
            .insert_task(
                &task,
                &legate_core::EventKind::Status {
                    state: TaskState::Completed,
                    message: None,
                    error: None,
                },
            )
            .unwrap();
        let err = StoreLedger::new(store.clone())
            .record(&task.id, &reference("late"))
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::Internal);
        assert_eq!(store.task(&task.id).unwrap().unwrap().remote, None);
    }

    proptest! {
        #[test]
        fn check_accepts_exactly_bounded_printable_ids(id in any::<String>()) {
            let ok = !id.is_empty()
                && id.len() <= MAX_REMOTE_ID_BYTES
                && !id.chars().any(char::is_control);
            prop_assert_eq!(check(&reference(&id)).is_ok(), ok);
            let mut context = reference("t");
            context.context_id = Some(id.clone());
            prop_assert_eq!(check(&context).is_ok(), ok);
        }
    }
}
