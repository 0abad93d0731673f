//! A remote task outlives the engine that started it: the engine is dropped mid-turn (its
//! runtime with it, as a process that died), another engine starts on the same home, takes
//! the task over and ends it with the remote outcome, not `SERVER_RESTARTED`.
//!
//! The remote is `legate_testkit::relay`: a real server on 127.0.0.1 whose tasks move only
//! when the test says so, and a backend whose `reattach` follows the recorded reference over
//! a new connection. Each engine runs in its own runtime; dropping the runtime drops every
//! future of that engine, so its runner lock goes as a dead process's would.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{AgentKind, AgentSpec, ErrorCode, EventKind, TaskId, TaskState};
use legate_engine::{Engine, SubmitRequest};
use legate_testkit::harness::{EngineHarness, HarnessBuilder, TestAgent, WAIT_LIMIT, until};
use legate_testkit::relay::{RELAY_BINDING, RelayBackend, RelayServer, RemoteEnd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Runtime;

struct Fixture {
    _dir: tempfile::TempDir,
    base: PathBuf,
    server: RelayServer,
    backend: Arc<RelayBackend>,
}

fn kind() -> AgentKind {
    AgentKind::new("relay").unwrap()
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let server = RelayServer::start();
        let backend = Arc::new(RelayBackend::new(&server));
        Self {
            _dir: dir,
            base,
            server,
            backend,
        }
    }

    /// The harness of every engine here: a local scripted agent `agent`, and `remote` served
    /// by the relay backend (the default).
    fn builder(&self) -> HarnessBuilder {
        let url = self.server.url();
        EngineHarness::builder()
            .agent(TestAgent::scripted("agent"))
            .backend(kind(), self.backend.clone())
            .config(move |c| {
                c.agents
                    .insert("remote".into(), AgentSpec::url("remote", kind(), url));
                c.default_agent = "remote".into();
            })
    }

    /// An engine on the shared home, in its own runtime.
    fn engine(&self) -> (Runtime, Engine) {
        let rt = runtime();
        let engine = {
            let _in = rt.enter();
            self.builder().engine_in(&self.base)
        };
        (rt, engine)
    }

    fn run_dir(&self) -> PathBuf {
        self.base.join("home").join("run")
    }

    /// Starts a remote task on a first engine, waits until the remote said something and the
    /// local task relayed it, then kills that engine. Returns the local and remote ids.
    fn killed_mid_turn(&self, timeout: Option<Duration>) -> (TaskId, String) {
        let (rt, engine) = self.engine();
        let (id, remote) =
            rt.block_on(async {
                let mut req = SubmitRequest::new("work remotely");
                req.timeout = timeout;
                let task = engine.submit(req).unwrap();
                let remote = self.server.task(1).await;
                self.server.say(&remote, "before the restart");
                until(&engine, &task.id, |e| {
                matches!(&e.kind, EventKind::Message { text } if text == "before the restart")
            })
            .await;
                (task.id, remote)
            });
        let bound = engine.task(id.as_str()).unwrap().remote.unwrap();
        assert_eq!(bound.task_id, remote);
        assert_eq!(bound.binding, RELAY_BINDING);
        assert_eq!(bound.url, self.server.url());
        kill(rt, engine, &self.run_dir());
        (id, remote)
    }
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Drops the engine and its runtime without ending anything, and checks its runner is dead.
fn kill(rt: Runtime, engine: Engine, run_dir: &std::path::Path) {
    let runner = engine.runner_id().to_string();
    drop(engine);
    drop(rt);
    assert!(
        !legate_engine::runner::is_alive(run_dir, &runner),
        "the dropped engine's runner must be dead"
    );
}

async fn ended(engine: &Engine, id: &TaskId) -> legate_core::Task {
    tokio::time::timeout(WAIT_LIMIT, engine.wait(id))
        .await
        .expect("the task did not end")
        .unwrap()
}

fn restarted(engine: &Engine, id: &TaskId) -> bool {
    engine.events(id, 0, 10_000).unwrap().iter().any(|e| {
        matches!(&e.kind, EventKind::Status { error: Some(err), .. } if err.code == ErrorCode::ServerRestarted)
    })
}

#[test]
fn a_remote_task_survives_its_engine_and_ends_with_each_remote_outcome() {
    let cases = [
        RemoteEnd::Completed { output_tokens: 7 },
        RemoteEnd::Failed {
            code: "AGENT_PROTOCOL_ERROR".into(),
            message: "the remote agent broke".into(),
        },
        RemoteEnd::InputRequired {
            question: "which branch?".into(),
        },
        RemoteEnd::Canceled,
    ];
    for end in cases {
        let fx = Fixture::new();
        let (id, remote) = fx.killed_mid_turn(None);
        let (rt, engine) = fx.engine();
        let task = rt.block_on(async {
            fx.server.subscribed(1).await;
            fx.server.say(&remote, "after the restart");
            fx.server.finish(&remote, end.clone());
            ended(&engine, &id).await
        });
        assert!(!restarted(&engine, &id), "{end:?}: not SERVER_RESTARTED");
        let events = engine.events(&id, 0, 10_000).unwrap();
        assert!(
            events.iter().any(
                |e| matches!(&e.kind, EventKind::Message { text } if text == "after the restart")
            ),
            "{end:?}: the events after the restart are stored"
        );
        match &end {
            RemoteEnd::Completed { .. } => {
                assert_eq!(task.state, TaskState::Completed, "{:?}", task.error);
                assert!(
                    task.result
                        .as_ref()
                        .unwrap()
                        .text
                        .contains("after the restart")
                );
                assert_eq!(task.usage.as_ref().unwrap().output_tokens, Some(7));
            }
            RemoteEnd::Failed { message, .. } => {
                assert_eq!(task.state, TaskState::Failed);
                let error = task.error.as_ref().unwrap();
                assert_eq!(
                    error.code,
                    ErrorCode::AgentProtocolError,
                    "{}",
                    error.message
                );
                assert_eq!(&error.message, message);
            }
            RemoteEnd::InputRequired { question } => {
                assert_eq!(task.state, TaskState::InputRequired);
                assert!(
                    task.status_message
                        .as_ref()
                        .unwrap()
                        .contains(question.as_str())
                );
            }
            RemoteEnd::Canceled => assert_eq!(task.state, TaskState::Canceled),
        }
        // The remote task was only followed: nobody here asked it to cancel.
        assert_eq!(fx.server.cancels(&remote), 0);
        assert_eq!(fx.backend.reattaches(), 1);
        rt.block_on(engine.shutdown());
    }
}

#[test]
fn two_engines_recovering_at_once_take_the_task_over_once() {
    let fx = Fixture::new();
    let (id, remote) = fx.killed_mid_turn(None);
    let rt = runtime();
    // Two engines start on the same home at the same moment, as two processes would.
    let handle = rt.handle().clone();
    let barrier = std::sync::Barrier::new(2);
    let (b, c) = std::thread::scope(|scope| {
        let start = || {
            scope.spawn(|| {
                let _in = handle.enter();
                let builder = fx.builder();
                barrier.wait();
                builder.engine_in(&fx.base)
            })
        };
        let (b, c) = (start(), start());
        (b.join().unwrap(), c.join().unwrap())
    });
    let task = rt.block_on(async {
        fx.server.subscribed(1).await;
        fx.server
            .finish(&remote, RemoteEnd::Completed { output_tokens: 1 });
        ended(&b, &id).await
    });
    assert_eq!(task.state, TaskState::Completed, "{:?}", task.error);
    assert_eq!(fx.server.subscriptions(), 1, "one engine followed the task");
    assert_eq!(fx.backend.reattaches(), 1);
    let ends = b
        .events(&id, 0, 10_000)
        .unwrap()
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::Status { state, .. } if state.is_terminal()))
        .count();
    assert_eq!(ends, 1, "the task ended once");
    rt.block_on(async {
        b.shutdown().await;
        c.shutdown().await;
    });
}

#[test]
fn a_local_task_of_a_dead_engine_still_fails_server_restarted() {
    let fx = Fixture::new();
    let (rt, engine) = fx.engine();
    let (local, remote_task) = rt.block_on(async {
        // The local agent is mid-turn (it said so) when its engine dies.
        let mut req = SubmitRequest::new("!say ready\n!hang");
        req.agent = Some("agent".into());
        let local = engine.submit(req).unwrap();
        until(
            &engine,
            &local.id,
            |e| matches!(&e.kind, EventKind::Message { text } if text.contains("ready")),
        )
        .await;
        let remote = engine.submit(SubmitRequest::new("work remotely")).unwrap();
        let rid = fx.server.task(1).await;
        fx.server.say(&rid, "bound");
        until(&engine, &remote.id, |e| {
            matches!(&e.kind, EventKind::Message { .. })
        })
        .await;
        (local.id, (remote.id, rid))
    });
    kill(rt, engine, &fx.run_dir());
    let (rt, engine) = fx.engine();
    let local = engine.task(local.as_str()).unwrap();
    assert_eq!(local.state, TaskState::Failed);
    let error = local.error.unwrap();
    assert_eq!(error.code, ErrorCode::ServerRestarted, "{}", error.message);
    let (id, rid) = remote_task;
    let task = rt.block_on(async {
        fx.server.subscribed(1).await;
        fx.server
            .finish(&rid, RemoteEnd::Completed { output_tokens: 2 });
        ended(&engine, &id).await
    });
    assert_eq!(task.state, TaskState::Completed);
    rt.block_on(engine.shutdown());
}

#[test]
fn canceling_an_adopted_task_cancels_the_remote_task() {
    let fx = Fixture::new();
    let (id, remote) = fx.killed_mid_turn(None);
    let (rt, engine) = fx.engine();
    let task = rt.block_on(async {
        fx.server.subscribed(1).await;
        engine.cancel(id.as_str()).unwrap();
        fx.server.canceled(&remote).await;
        ended(&engine, &id).await
    });
    assert_eq!(task.state, TaskState::Canceled, "{:?}", task.error);
    assert_eq!(fx.server.cancels(&remote), 1);
    rt.block_on(engine.shutdown());
}

#[test]
fn a_cancel_asked_while_no_process_followed_the_task_reaches_the_remote() {
    let fx = Fixture::new();
    let (id, remote) = fx.killed_mid_turn(None);
    // No engine runs: the cancel is recorded in the store, as `legate cancel` of another
    // process would leave it.
    let store = legate_store::Store::open(&fx.base.join("home").join("legate.db")).unwrap();
    assert!(store.request_cancel(&id).unwrap());
    drop(store);
    let (rt, engine) = fx.engine();
    let task = rt.block_on(async {
        fx.server.canceled(&remote).await;
        ended(&engine, &id).await
    });
    assert_eq!(task.state, TaskState::Canceled, "{:?}", task.error);
    assert_eq!(fx.server.cancels(&remote), 1);
    rt.block_on(engine.shutdown());
}

#[test]
fn an_adopted_task_times_out_with_what_was_left_of_its_timeout() {
    let fx = Fixture::new();
    let (id, remote) = fx.killed_mid_turn(Some(Duration::from_secs(3)));
    let (rt, engine) = fx.engine();
    let task = rt.block_on(async {
        fx.server.subscribed(1).await;
        // Nothing more comes from the remote: the local timeout ends it.
        ended(&engine, &id).await
    });
    assert_eq!(task.state, TaskState::Failed);
    assert_eq!(task.error.unwrap().code, ErrorCode::TaskTimeout);
    assert_eq!(
        fx.server.cancels(&remote),
        1,
        "the remote was asked to cancel"
    );
    rt.block_on(engine.shutdown());
}

#[test]
fn an_unreachable_remote_ends_the_task_remote_unreachable_after_bounded_retries() {
    let mut fx = Fixture::new();
    let (id, _remote) = fx.killed_mid_turn(None);
    fx.server.stop();
    let (rt, engine) = fx.engine();
    let task = rt.block_on(ended(&engine, &id));
    assert_eq!(task.state, TaskState::Failed);
    assert_eq!(task.error.unwrap().code, ErrorCode::RemoteUnreachable);
    assert_eq!(
        fx.backend.reattaches(),
        legate_engine::REATTACH_ATTEMPTS as usize
    );
    rt.block_on(engine.shutdown());
}

#[test]
fn an_adopter_that_dies_or_stops_leaves_the_task_to_the_next() {
    let fx = Fixture::new();
    let (id, remote) = fx.killed_mid_turn(None);
    // The first adopter dies too.
    let (rt, engine) = fx.engine();
    rt.block_on(fx.server.subscribed(1));
    kill(rt, engine, &fx.run_dir());
    // The second one shuts down: it lets the task go instead of canceling it.
    let (rt, engine) = fx.engine();
    rt.block_on(async {
        fx.server.subscribed(2).await;
        engine.shutdown().await;
    });
    assert_eq!(engine.task(id.as_str()).unwrap().state, TaskState::Working);
    assert_eq!(fx.server.cancels(&remote), 0, "shutdown did not cancel it");
    drop(engine);
    drop(rt);
    // The third one follows it to its end.
    let (rt, engine) = fx.engine();
    let task = rt.block_on(async {
        fx.server.subscribed(3).await;
        fx.server
            .finish(&remote, RemoteEnd::Completed { output_tokens: 3 });
        ended(&engine, &id).await
    });
    assert_eq!(task.state, TaskState::Completed, "{:?}", task.error);
    assert!(!restarted(&engine, &id));
    assert_eq!(fx.backend.reattaches(), 3);
    rt.block_on(engine.shutdown());
}

/// A live engine that cannot follow a dead engine's remote task (its agent is not configured
/// there) takes it over and ends it `SERVER_RESTARTED`, with the approval it left pending
/// expired first: an approval left pending on an ended task would wait for good.
#[test]
fn a_task_taken_over_by_an_engine_that_cannot_follow_it_ends_with_its_approvals_expired() {
    use legate_store::{Approval, ApprovalFilter, ApprovalState, Store, ToolCallSummary};
    let fx = Fixture::new();
    // The engine that will take the task over knows only the local agent.
    let rt_local = runtime();
    let local = {
        let _in = rt_local.enter();
        EngineHarness::builder()
            .agent(TestAgent::scripted("agent"))
            .config(|c| c.default_agent = "agent".into())
            .engine_in(&fx.base)
    };
    // The remote task's engine, mid-turn, with an approval pending when it dies.
    let (rt, engine) = fx.engine();
    let id = rt.block_on(async {
        let task = engine.submit(SubmitRequest::new("work remotely")).unwrap();
        let remote = fx.server.task(1).await;
        fx.server.say(&remote, "bound");
        until(&engine, &task.id, |e| {
            matches!(&e.kind, EventKind::Message { .. })
        })
        .await;
        task.id
    });
    // Written by hand (the relay's agent asks nothing); a real one would be the dead
    // engine's supervisor's question.
    let store = Store::open(&fx.base.join("home").join("legate.db")).unwrap();
    let asked = Approval {
        id: "a-unfollowable".into(),
        task_id: id.clone(),
        agent: "remote".into(),
        role: "worker".into(),
        tool: ToolCallSummary {
            kind: legate_core::ToolKind::Execute,
            title: "touch x".into(),
            paths: Vec::new(),
            command: Some(vec!["touch".into(), "x".into()]),
            script: None,
            destination: None,
        },
        options: Vec::new(),
        rule_id: None,
        reason: "ask".into(),
        answerers: vec!["human".into()],
        created_at: legate_core::Timestamp(1),
        deadline: legate_core::Timestamp(i64::MAX),
        state: ApprovalState::Pending,
        answer: None,
        closed_reason: None,
        decided: None,
    };
    store.insert_approval(&asked, "s").unwrap();
    kill(rt, engine, &fx.run_dir());
    // Its housekeeping takes over the dead runner's remote tasks about once a second.
    let task = rt_local.block_on(ended(&local, &id));
    assert_eq!(task.state, TaskState::Failed);
    let error = task.error.unwrap();
    assert_eq!(error.code, ErrorCode::ServerRestarted);
    assert!(
        error
            .message
            .contains("can no longer follow the remote task"),
        "{}",
        error.message
    );
    assert_eq!(fx.backend.reattaches(), 0, "nothing followed it");
    let approval = store.approval("a-unfollowable").unwrap().unwrap();
    assert_eq!(approval.state, ApprovalState::Expired);
    assert!(
        store
            .approvals(&ApprovalFilter::default())
            .unwrap()
            .iter()
            .all(|a| a.state != ApprovalState::Pending)
    );
    rt_local.block_on(local.shutdown());
}
