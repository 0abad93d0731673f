//! Live fan-out of stored events to subscribers, with no gap and no duplicate.
//!
//! Events reach this module only after they are committed to the store. A subscriber first
//! listens live, then reads the store from its cursor, then takes live events whose numbers
//! follow on from the last it delivered, without touching the store. A gap, a lag (it fell
//! behind the live channel) or a quiet spell sends it back to the store, so a slow subscriber
//! costs itself, never the agent. Tasks run by another process are followed by polling the
//! store. A plan is the agent's whole plan, so a relay that asks for it
//! ([`Subscription::skipping_superseded_plans`], the A2A front's streams) skips a plan when it
//! has fallen behind (at least [`BEHIND`] events waiting for it) and a later plan is waiting
//! too: it gets the latest plan, not every one in between (each skipped number is simply never
//! delivered), and its cost stays in proportion to what it can read. One that keeps up, and
//! every other follower (`legate events --follow` prints the whole log), gets every plan.
//!
//! A subscriber never waits on a dead process: after [`LIVENESS`] without an event it looks
//! at the task's row. A task whose runner is gone (killed, even with `kill -9`) is recovered
//! then and there ([`runner::recover`]: `failed` with `SERVER_RESTARTED`), so the subscriber
//! reads that status and ends; a task already ended ends the subscription even when its
//! terminal event lies before the cursor (`--after` past the end). A task bound to a remote
//! task is spared by that recovery ([`runner::SPARE_EVERY_REMOTE`]): an engine takes it over
//! (`adoption`), and the subscriber follows its events from the store as before.

use crate::config::Paths;
use crate::core::runner;
use crate::metrics::histogram::{Histogram, HistogramSnapshot, RELAY_LAG_BOUNDS_SECS};
use legate_core::{Event, EventKind, Result, TaskId};
use legate_store::Store;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::time::Instant;

/// How many events waiting for a subscriber make it behind: superseded plans are skipped.
pub(crate) const BEHIND: usize = 16;

/// How often a subscriber looks at the store when nothing arrives live.
const POLL: Duration = Duration::from_millis(250);

/// How long a subscriber hears nothing before it checks that the task's runner is alive
/// (and again after each such quiet spell).
pub(crate) const LIVENESS: Duration = Duration::from_secs(1);

/// The live side: one channel for every task of this engine.
#[derive(Debug, Clone)]
pub struct Fanout {
    tx: broadcast::Sender<Event>,
    /// Where runners keep their locks (`$LEGATE_HOME/run`) and copies live, for recovery.
    paths: Paths,
    /// This process's runner, never judged dead by its own subscribers.
    own: Option<String>,
    /// How many stored events this engine has announced since it started.
    relayed: Arc<AtomicU64>,
    /// How long agents' events took from their backend to their announcement.
    lag: Arc<Histogram>,
}

impl Fanout {
    /// A fan-out that buffers `capacity` events per subscriber before it lags; `paths` says
    /// where the runners' locks are, to tell a live runner from a dead one (and where the
    /// copies recovery settles are); `own` is this process's runner id, if it runs tasks.
    pub fn new(capacity: usize, paths: Paths, own: Option<String>) -> Self {
        let (tx, _) = broadcast::channel(capacity);
        Self {
            tx,
            paths,
            own,
            relayed: Arc::default(),
            lag: Arc::new(Histogram::new(&RELAY_LAG_BOUNDS_SECS)),
        }
    }

    /// How long agents' batches of events took from their backend to their announcement
    /// ([`Fanout::publish_owned`]), since this engine started.
    pub fn relay_lag(&self) -> HistogramSnapshot {
        self.lag.snapshot()
    }

    /// How many stored events this engine has announced since it started (whether or not
    /// anyone listened).
    pub fn relayed(&self) -> u64 {
        self.relayed.load(Ordering::Relaxed)
    }

    /// Announces stored events.
    pub fn publish(&self, events: &[Event]) {
        self.relayed.fetch_add(
            u64::try_from(events.len()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        if self.tx.receiver_count() == 0 {
            return;
        }
        for e in events {
            let _ = self.tx.send(e.clone());
        }
    }

    /// [`Fanout::publish`] for events no one else needs: announced without a copy (a plan
    /// event is as big as the agent's plan). When a backend reported them, the oldest at
    /// `reported`, the time since then is one observation of the relay lag (one a batch, not
    /// one an event: the batch's oldest waited longest).
    pub fn publish_owned(&self, events: Vec<Event>, reported: Option<std::time::Instant>) {
        self.relayed.fetch_add(
            u64::try_from(events.len()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        if self.tx.receiver_count() > 0 {
            for e in events {
                let _ = self.tx.send(e);
            }
        }
        if let Some(at) = reported {
            self.lag.observe(at.elapsed());
        }
    }

    /// Every event published from now on, of every task (a receiver that falls behind gets
    /// `Lagged` and should read the store again).
    pub fn all(&self) -> broadcast::Receiver<Event> {
        self.tx.subscribe()
    }

    /// Follows one task from `after` (exclusive).
    pub fn subscribe(&self, store: Store, task_id: TaskId, after: u64) -> Subscription {
        Subscription {
            rx: self.tx.subscribe(),
            store,
            task_id,
            cursor: after,
            backlog: VecDeque::new(),
            last_plan: 0,
            skip_plans: false,
            done: false,
            catch_up: true,
            paths: self.paths.clone(),
            own: self.own.clone(),
            heard: Instant::now(),
            ended: false,
        }
    }
}

/// One subscriber's view of one task's events.
#[derive(Debug)]
pub struct Subscription {
    rx: broadcast::Receiver<Event>,
    store: Store,
    task_id: TaskId,
    cursor: u64,
    backlog: VecDeque<Event>,
    /// The number of the last plan put in the backlog: any earlier one waiting is superseded.
    last_plan: u64,
    /// Whether superseded plans are skipped when behind.
    skip_plans: bool,
    done: bool,
    /// Whether the store may hold events the live channel did not bring (at the start, after
    /// a gap or a lag, and after a quiet spell that may mean another process is writing).
    catch_up: bool,
    paths: Paths,
    own: Option<String>,
    /// When the subscriber last got an event or checked the task's runner.
    heard: Instant,
    /// The task's row says it ended: once the store has nothing more, the subscription ends.
    ended: bool,
}

impl Subscription {
    /// The same subscription for a relay: when it has fallen behind, a plan superseded by a
    /// later one already waiting is skipped.
    #[must_use]
    pub fn skipping_superseded_plans(mut self) -> Self {
        self.skip_plans = true;
        self
    }

    /// The next event, or `None` after the task's terminal status event.
    pub async fn next(&mut self) -> Result<Option<Event>> {
        loop {
            if let Some(e) = self.backlog.pop_front() {
                if self.skip_plans
                    && matches!(e.kind, EventKind::Plan { .. })
                    && e.seq < self.last_plan
                    && self.backlog.len() >= BEHIND
                {
                    // Behind, and a later plan is waiting: this one is superseded unread.
                    self.cursor = e.seq;
                    continue;
                }
                return Ok(Some(self.deliver(e)));
            }
            if self.done {
                return Ok(None);
            }
            if self.catch_up {
                let stored = self.store.events(&self.task_id, self.cursor, 1000)?;
                if !stored.is_empty() {
                    self.heard = Instant::now();
                    stored.into_iter().for_each(|e| self.wait(e));
                    continue;
                }
                self.catch_up = false;
                if self.ended {
                    self.done = true;
                    return Ok(None);
                }
            }
            match tokio::time::timeout(POLL, self.rx.recv()).await {
                Ok(Ok(e)) => self.take_live(e),
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => self.catch_up = true,
                Ok(Err(broadcast::error::RecvError::Closed)) => {
                    // No live side (another process runs the task): poll the store.
                    tokio::time::sleep(POLL).await;
                    self.quiet()?;
                }
                Err(_quiet) => self.quiet()?,
            }
        }
    }

    /// Nothing arrived for a while: read the store again, and after [`LIVENESS`] of quiet
    /// look at the task's row. An ended task ends the subscription once the store has
    /// nothing more (its terminal event may lie before the cursor); a task whose runner died
    /// is recovered, which stores its `SERVER_RESTARTED` status for the catch-up to read.
    fn quiet(&mut self) -> Result<()> {
        self.catch_up = true;
        if self.heard.elapsed() < LIVENESS {
            return Ok(());
        }
        self.heard = Instant::now();
        match self.store.task_runner(&self.task_id)? {
            Some((state, _)) if state.is_terminal() => self.ended = true,
            // Gone (retention pruned it after it ended): nothing more will come, and the
            // waiter reads TASK_NOT_FOUND.
            None => self.ended = true,
            Some((_, Some(id)))
                if self.own.as_deref() != Some(id.as_str())
                    && !runner::is_alive(&self.paths.run(), &id) =>
            {
                let marked = runner::recover_others(
                    &self.store,
                    &self.paths,
                    self.own.as_deref(),
                    runner::SPARE_EVERY_REMOTE,
                )?;
                tracing::debug!(task = %self.task_id, runner = %id, marked, "the task's runner is gone; recovered");
            }
            _ => {}
        }
        Ok(())
    }

    /// Takes a live event and whatever else is already waiting, as long as the numbers follow
    /// on from the cursor; a gap sends the subscriber back to the store.
    fn take_live(&mut self, first: Event) {
        let mut next = Some(first);
        while let Some(e) = next.take() {
            if e.task_id == self.task_id {
                let expected = self.cursor + 1 + self.backlog.len() as u64;
                if e.seq == expected {
                    self.heard = Instant::now();
                    self.wait(e);
                } else if e.seq > expected {
                    self.catch_up = true;
                    return;
                }
            }
            next = match self.rx.try_recv() {
                Ok(e) => Some(e),
                Err(broadcast::error::TryRecvError::Lagged(_)) => {
                    self.catch_up = true;
                    None
                }
                Err(_) => None,
            };
        }
    }

    /// Puts `e` in the backlog, noting a plan.
    fn wait(&mut self, e: Event) {
        if matches!(e.kind, EventKind::Plan { .. }) {
            self.last_plan = e.seq;
        }
        self.backlog.push_back(e);
    }

    fn deliver(&mut self, e: Event) -> Event {
        self.cursor = e.seq;
        if let EventKind::Status { state, .. } = &e.kind
            && state.is_terminal()
        {
            self.done = true;
            self.backlog.clear();
        }
        e
    }

    /// The number of the last event delivered.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use legate_core::{ErrorCode, Task, TaskState};

    fn insert(store: &Store, id: &str, runner: &str) -> TaskId {
        let mut task = Task::new(id, "c", "a", "p");
        task.state = TaskState::Working;
        let working = EventKind::Status {
            state: TaskState::Working,
            message: None,
            error: None,
        };
        store.insert_task(&task, &working).unwrap();
        store.set_runner(&task.id, Some(runner)).unwrap();
        task.id
    }

    async fn drain(sub: &mut Subscription) -> Vec<Event> {
        let mut events = Vec::new();
        let all = async {
            while let Some(e) = sub.next().await.unwrap() {
                events.push(e);
            }
        };
        tokio::time::timeout(Duration::from_secs(60), all)
            .await
            .unwrap();
        events
    }

    #[tokio::test]
    async fn a_lagging_follower_gets_the_latest_plan_not_every_one_in_between() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("legate.db")).unwrap();
        let task = insert(&store, "plans", "ownrunner001");
        let plan = |n: usize| EventKind::Plan {
            entries: (0..n)
                .map(|i| legate_core::PlanEntry {
                    content: format!("step {i}"),
                    priority: "medium".into(),
                    status: "pending".into(),
                })
                .collect(),
        };
        let said = |t: &str| EventKind::Message { text: t.into() };
        let completed = EventKind::Status {
            state: TaskState::Completed,
            message: None,
            error: None,
        };
        let mut kinds = vec![plan(1), said("a"), plan(2), plan(3)];
        kinds.extend((0..20).map(|_| said("x")));
        kinds.extend([plan(4), said("b"), completed.clone()]);
        // Everything stored before the follower reads: all of it waits for it at once.
        store.append_events(&task, &kinds).unwrap();
        let fanout = Fanout::new(16, Paths::new(dir.path()), Some("ownrunner001".into()));
        // A follower that does not ask for it gets every plan.
        let all = drain(&mut fanout.subscribe(store.clone(), task.clone(), 0)).await;
        assert_eq!(all.len(), 28);
        let got = drain(
            &mut fanout
                .subscribe(store.clone(), task.clone(), 0)
                .skipping_superseded_plans(),
        )
        .await;
        let seqs: Vec<u64> = got.iter().map(|e| e.seq).collect();
        let expected: Vec<u64> = [1, 3].into_iter().chain(6..=28).collect();
        assert_eq!(seqs, expected);
        assert_eq!(got[22].kind, plan(4));
        // The store keeps every plan.
        assert_eq!(store.events(&task, 1, 100).unwrap().len(), 27);

        // A follower only a few events behind gets every plan.
        let near = insert(&store, "near", "ownrunner001");
        store
            .append_events(&near, &[plan(1), plan(2), said("c"), plan(3), completed])
            .unwrap();
        let got = drain(
            &mut fanout
                .subscribe(store.clone(), near, 0)
                .skipping_superseded_plans(),
        )
        .await;
        assert_eq!(got.len(), 6);
    }

    #[tokio::test]
    async fn a_follower_never_judges_its_own_processs_runner() {
        // Its lock file is gone (as if a check had failed): still never recovered by its own
        // process's followers, which know it is alive.
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("legate.db")).unwrap();
        let own = "ownrunner001";
        let task = insert(&store, "mine", own);
        let fanout = Fanout::new(16, Paths::new(dir.path()), Some(own.to_string()));
        let mut sub = fanout.subscribe(store.clone(), task.clone(), 0);
        assert_eq!(sub.next().await.unwrap().map(|e| e.seq), Some(1));
        let more = tokio::time::timeout(LIVENESS * 3, sub.next()).await;
        assert!(more.is_err(), "{more:?}");
        assert_eq!(
            store.task(&task).unwrap().unwrap().state,
            TaskState::Working
        );
    }

    #[tokio::test]
    async fn followers_end_on_a_dead_runner_and_on_an_ended_task_but_wait_on_a_live_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("legate.db")).unwrap();
        let run_dir = dir.path().join("run");
        let live = runner::Runner::claim(&run_dir).unwrap();
        let running = insert(&store, "running", live.id());
        let orphan = insert(&store, "orphan", "deadrunner01");
        let fanout = Fanout::new(16, Paths::new(dir.path()), None);

        // The runner is gone: the follower recovers the task and reads its end.
        let events = drain(&mut fanout.subscribe(store.clone(), orphan.clone(), 0)).await;
        let Some(EventKind::Status { state, error, .. }) = events.last().map(|e| &e.kind) else {
            panic!("{events:?}");
        };
        assert_eq!(*state, TaskState::Failed);
        assert_eq!(
            error.as_ref().map(|e| e.code),
            Some(ErrorCode::ServerRestarted)
        );

        // A live runner: the follower keeps waiting through several liveness checks.
        let mut sub = fanout.subscribe(store.clone(), running.clone(), 0);
        assert_eq!(sub.next().await.unwrap().map(|e| e.seq), Some(1));
        let more = tokio::time::timeout(LIVENESS * 3, sub.next()).await;
        assert!(more.is_err(), "{more:?}");
        assert_eq!(
            store.task(&running).unwrap().unwrap().state,
            TaskState::Working
        );

        // Its runner gone too, the task ends; a follower whose cursor lies past the task's
        // last event still ends.
        drop(live);
        assert!(
            drain(&mut fanout.subscribe(store.clone(), running, 100))
                .await
                .is_empty()
        );

        // A task no longer stored (retention pruned it after it ended): the follower ends
        // instead of waiting on.
        let gone = TaskId("pruned".into());
        let ended = tokio::time::timeout(
            LIVENESS * 10,
            drain(&mut fanout.subscribe(store.clone(), gone, 0)),
        )
        .await;
        assert!(ended.is_ok_and(|events| events.is_empty()));
    }
}
