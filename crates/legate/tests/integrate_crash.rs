//! `kill -9` of the real `legate integrate` at random moments: after each, the next command
//! (`legate show`) leaves the original byte-identical, modes included, to either the original
//! or the full integration, with no `.legate-*` file anywhere and no journal left.
//!
//! The moments are seeded (`LEGATE_CRASH_SEED`, printed) and half of them fall in the
//! journaled phase (after the journal directory appears). `LEGATE_CRASH_TRIALS` sets the
//! count: the issue's 50 by default.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::{CliHome, task_id, text};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

type Tree = BTreeMap<String, (u32, Option<Vec<u8>>)>;

/// Every entry under `root` but `.git`: path → (mode, bytes) for files, mode for directories.
fn snapshot(root: &Path) -> Tree {
    fn walk(root: &Path, dir: &Path, out: &mut Tree) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if rel == ".git" {
                continue;
            }
            let m = fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                out.insert(rel, (m.permissions().mode(), None));
                walk(root, &p, out);
            } else {
                out.insert(rel, (m.permissions().mode(), Some(fs::read(&p).unwrap())));
            }
        }
    }
    let mut out = Tree::new();
    walk(root, root, &mut out);
    out
}

/// Puts the tree `want` back at `root` (files and modes), removing what it lacks.
fn restore(root: &Path, want: &Tree) {
    let now = snapshot(root);
    for (path, _) in now.iter().rev() {
        if !want.contains_key(path) {
            let p = root.join(path);
            if p.is_dir() {
                fs::remove_dir(&p).unwrap();
            } else {
                fs::remove_file(&p).unwrap();
            }
        }
    }
    for (path, (mode, bytes)) in want {
        let p = root.join(path);
        match bytes {
            None => fs::create_dir_all(&p).unwrap(),
            Some(b) => fs::write(&p, b).unwrap(),
        }
        fs::set_permissions(&p, fs::Permissions::from_mode(*mode)).unwrap();
    }
    assert_eq!(&snapshot(root), want);
}

/// A small seeded generator (xorshift64*), enough for reproducible delays.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
    }
}

/// Trials without `LEGATE_CRASH_TRIALS`: the issue's 50 (about two minutes on a loaded 2-core
/// machine, since each integrated outcome costs a new task).
const DEFAULT_TRIALS: usize = 50;

const MODIFIED: usize = 50;
const DELETED: usize = 25;
const ADDED: usize = 25;

/// A home and its project: files in nested directories, some executable, committed.
fn fixture() -> CliHome {
    let env = CliHome::new(env!("CARGO_BIN_EXE_legate"));
    let project = env.project();
    for i in 0..MODIFIED + DELETED + 10 {
        let p = project.join(format!("src/m{}/f{i}.txt", i % 7));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, format!("line {i}\nsecond\n")).unwrap();
        if i % 5 == 0 {
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    env.make_project(&[]);
    env
}

/// A completed, verified copy task with 100 changes: modified, deleted, and added files
/// (some in new, nested directories). Returns its id.
fn task(env: &CliHome) -> String {
    let criteria = env.write(
        "criteria.json",
        r#"[{"id": "added", "description": "the first file is added",
             "check": {"kind": "file-exists", "path": "new/d0/deep/a0.txt"}}]"#,
    );
    // One shell command makes every change (one tool call, so a task is quick to make).
    let mut script = String::from("run sed -i s/line/LINE/");
    for i in 0..MODIFIED {
        script.push_str(&format!(" src/m{}/f{i}.txt", i % 7));
    }
    script.push_str(" && rm");
    for i in MODIFIED..MODIFIED + DELETED {
        script.push_str(&format!(" src/m{}/f{i}.txt", i % 7));
    }
    script.push_str(" && mkdir -p new/d0/deep new/d1/deep new/d2/deep new/d3/deep");
    for i in 0..ADDED {
        script.push_str(&format!(
            " && echo added {i} > new/d{}/deep/a{i}.txt",
            i % 4
        ));
    }
    let project = env.project().to_string_lossy().into_owned();
    let out = env.run(&["run", "--copy", &project, "--criteria", &criteria, &script]);
    assert!(out.status.success(), "{}", text(&out));
    let id = task_id(&out);
    let reviews = env.write(
        "reviews.json",
        r#"[{"criterionId": "added", "verdict": "passed", "path": "new/d0/deep/a0.txt",
             "line": 1, "quote": "added 0", "explanation": "the file is there"}]"#,
    );
    let verify = env.run(&["verify", &id, "--review", &reviews]);
    assert!(verify.status.success(), "{}", text(&verify));
    id
}

/// Every path under the project or the home's integrations that is Legate's debris.
fn debris(env: &CliHome) -> Vec<String> {
    let mut found: Vec<String> = snapshot(&env.project())
        .into_keys()
        .filter(|p| {
            p.rsplit('/')
                .next()
                .is_some_and(|n| n.starts_with(".legate-"))
        })
        .collect();
    if let Ok(entries) = fs::read_dir(env.home().join("run/integrations")) {
        found.extend(entries.map(|e| e.unwrap().path().display().to_string()));
    }
    found
}

#[test]
fn kill_9_during_integrate_leaves_the_original_untouched_or_exactly_integrated() {
    let trials: usize = std::env::var("LEGATE_CRASH_TRIALS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_TRIALS);
    let seed: u64 = std::env::var("LEGATE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
        | 1;
    eprintln!("LEGATE_CRASH_SEED={seed} LEGATE_CRASH_TRIALS={trials}");
    let mut rng = Rng(seed);
    let env = fixture();
    let before = snapshot(&env.project());

    // One clean integration: the expected result, and how long the process and its
    // journaled phase take.
    let id = task(&env);
    let journal = env.home().join("run/integrations").join(&id);
    let started = Instant::now();
    let mut child = env
        .cmd(&["integrate", &id])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let (mut appeared, mut gone) = (None, None);
    while child.try_wait().unwrap().is_none() {
        let there = journal.exists();
        if appeared.is_none() && there {
            appeared = Some(Instant::now());
        }
        if appeared.is_some() && gone.is_none() && !there {
            gone = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    let total = started.elapsed();
    let phase = match (appeared, gone) {
        (Some(a), Some(g)) => g - a,
        _ => total / 4,
    };
    let after = snapshot(&env.project());
    assert_ne!(after, before);
    assert_eq!(
        after.len(),
        before.len() - DELETED + ADDED + 9,
        "new/, new/d*, new/d*/deep"
    );
    assert!(debris(&env).is_empty(), "{:?}", debris(&env));
    eprintln!("a clean integrate: {total:?}, its journal there for {phase:?}");
    restore(&env.project(), &before);

    let mut id = task(&env);
    let (mut forward, mut back, mut in_phase) = (0, 0, 0);
    // Recoveries seen by `legate show`: rolled forward, and rolled back (counted per task).
    let (mut recovered_forward, mut recovered_back, mut backs_of_task) = (0, 0, 0);
    for trial in 0..trials {
        let journal = env.home().join("run/integrations").join(&id);
        let mut child = env
            .cmd(&["integrate", &id])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let aim_phase = trial % 2 == 1;
        let delay = if aim_phase {
            // Wait for the journal (an event, not a guess), then a random moment in its phase.
            let limit = Instant::now() + Duration::from_secs(30);
            while !journal.exists() && child.try_wait().unwrap().is_none() && Instant::now() < limit
            {
                std::thread::sleep(Duration::from_micros(100));
            }
            {
                // Every other one early in the phase, where staging ends and renames begin.
                let window = if trial % 4 == 1 {
                    phase / 3
                } else {
                    phase * 5 / 4
                };
                Duration::from_micros(rng.below(window.as_micros() as u64 + 1))
            }
        } else {
            Duration::from_micros(rng.below(total.as_micros() as u64 * 5 / 4 + 1))
        };
        std::thread::sleep(delay);
        let was_journaled = journal.exists();
        let _ = child.kill();
        let status = child.wait().unwrap();
        if was_journaled {
            in_phase += 1;
        }

        // The next command finishes the job.
        let show = env.run(&["show", &id]);
        assert!(show.status.success(), "trial {trial}: {}", text(&show));
        let shown = String::from_utf8_lossy(&show.stdout).into_owned();
        let now = snapshot(&env.project());
        assert!(
            debris(&env).is_empty(),
            "seed {seed} trial {trial}: debris {:?}",
            debris(&env)
        );
        let backs = shown.matches("rolled back").count();
        recovered_back += backs - backs_of_task;
        backs_of_task = backs;
        if now == after {
            forward += 1;
            backs_of_task = 0;
            if shown.contains("rolled forward") {
                recovered_forward += 1;
            }
            assert!(
                shown.contains("integrated 100 files"),
                "trial {trial}: {shown}"
            );
            if forward == 1 {
                let again = env.run(&["integrate", &id]);
                assert!(
                    String::from_utf8_lossy(&again.stderr).contains("already integrated"),
                    "trial {trial}: {}",
                    text(&again)
                );
            }
            restore(&env.project(), &before);
            id = task(&env);
        } else {
            assert!(
                now == before,
                "seed {seed} trial {trial} (killed {delay:?} in, {status}): the original is neither \
                 untouched nor integrated; {} paths differ from the original",
                now.iter()
                    .filter(|(k, v)| before.get(*k) != Some(v))
                    .count()
                    + before.keys().filter(|k| !now.contains_key(*k)).count()
            );
            back += 1;
            assert!(
                !shown.contains("integrated 100 files"),
                "trial {trial}: {shown}"
            );
            if shown.contains("recovery") {
                assert!(shown.contains("rolled back"), "trial {trial}: {shown}");
            }
        }
    }
    eprintln!(
        "{trials} kills: {forward} ended integrated ({recovered_forward} rolled forward by the \
         next command), {back} untouched ({recovered_back} rolled back), {in_phase} during the \
         journaled phase"
    );
    assert_eq!(forward + back, trials);

    // The task now is fresh or rolled back: it integrates, exactly, and says what happened.
    let last = env.run(&["integrate", &id]);
    assert!(last.status.success(), "{}", text(&last));
    assert_eq!(snapshot(&env.project()), after);
    assert!(debris(&env).is_empty(), "{:?}", debris(&env));
    let events = env.run(&["events", &id]);
    let events = String::from_utf8_lossy(&events.stdout).into_owned();
    let shown = env.run(&["show", &id]);
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(shown.contains("integrated 100 files"), "{shown}");
    assert_eq!(
        events.contains("copy.integration_recovered"),
        shown.contains("recovery an interrupted integration"),
        "{events}\n{shown}"
    );
}
