//! The `legate` binary in a test: [`CliHome`] is a temporary directory whose `home/` is the
//! `$LEGATE_HOME` every command runs with (and whose `project/` is the git project a suite
//! may make), or ([`CliHome::at`]) a home another harness owns, and [`KillOnDrop`] a process
//! that must not outlive its test. Owns how a test
//! runs the binary (its environment, stdin closed) and reads back what every suite reads
//! (a task's JSON, its events, the id `legate run` printed); it checks only that such a read
//! succeeded, never what a test is about.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// A temporary directory, `$LEGATE_HOME` at `<dir>/home`, and the `legate` binary run in it
/// with `LEGATE_LOG` and `RUST_LOG` unset and stdin closed.
#[derive(Debug)]
pub struct CliHome {
    _dir: Option<tempfile::TempDir>,
    base: PathBuf,
    home: PathBuf,
    bin: PathBuf,
    env: Vec<(String, Option<String>)>,
}

impl CliHome {
    /// A fresh directory; `bin` is the binary (`env!("CARGO_BIN_EXE_legate")`). The home is
    /// not created.
    pub fn new(bin: impl AsRef<Path>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        Self {
            _dir: Some(dir),
            home: base.join("home"),
            base,
            bin: bin.as_ref().to_path_buf(),
            env: Vec::new(),
        }
    }

    /// The binary run on `home`, a `$LEGATE_HOME` another harness owns (an engine harness's
    /// [`legate_testkit::EngineHarness::home`]), which outlives this value; the directory
    /// ([`CliHome::base`]) is the home's parent. Nothing is created or removed.
    pub fn at(bin: impl AsRef<Path>, home: &Path) -> Self {
        let home = home.to_path_buf();
        Self {
            _dir: None,
            base: home.parent().unwrap_or(&home).to_path_buf(),
            home,
            bin: bin.as_ref().to_path_buf(),
            env: Vec::new(),
        }
    }

    /// A fresh directory whose home holds `legate.toml` = `config`.
    pub fn with_config(bin: impl AsRef<Path>, config: &str) -> Self {
        let home = Self::new(bin);
        home.configure(config);
        home
    }

    /// Makes the home and writes its `legate.toml` = `config` (for a configuration that names
    /// a path in the directory).
    pub fn configure(&self, config: &str) {
        std::fs::create_dir_all(self.home()).unwrap();
        std::fs::write(self.home().join("legate.toml"), config).unwrap();
    }

    /// Every command also runs with `key` = `value`.
    #[must_use]
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), Some(value.to_string())));
        self
    }

    /// Every command also runs without `key`.
    #[must_use]
    pub fn env_remove(mut self, key: &str) -> Self {
        self.env.push((key.to_string(), None));
        self
    }

    /// The directory, resolved (the home is `home/` in it); the same as [`CliHome::base`].
    pub fn path(&self) -> &Path {
        &self.base
    }

    /// The directory, resolved.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// `$LEGATE_HOME`: `<dir>/home`, resolved (or the home given to [`CliHome::at`]).
    pub fn home(&self) -> PathBuf {
        self.home.clone()
    }

    /// The project a suite makes with [`CliHome::make_project`]: `<dir>/project`, resolved.
    pub fn project(&self) -> PathBuf {
        self.base.join("project")
    }

    /// Writes `files` into a new git repository at [`CliHome::project`] and commits them;
    /// its path.
    pub fn make_project(&self, files: &[(&str, &str)]) -> PathBuf {
        let project = self.project();
        legate_testkit::harness::make_project(&project, files);
        project
    }

    /// Where the home keeps task `id`'s copy.
    pub fn copy(&self, id: &str) -> PathBuf {
        self.home().join("copies").join(id)
    }

    /// Where the home keeps task `id`'s baseline.
    pub fn baseline(&self, id: &str) -> PathBuf {
        self.home().join("baselines").join(id)
    }

    /// The binary with `args`, ready to run in this home.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.program(&self.bin);
        c.args(args);
        c
    }

    /// Runs `program script args…` (a suite's client script) with this home's environment
    /// and reads the JSON line it prints last; panics with its output when it fails.
    pub fn script_report(
        &self,
        program: impl AsRef<std::ffi::OsStr>,
        script: &Path,
        args: &[&std::ffi::OsStr],
    ) -> Value {
        let out = self
            .program(program)
            .arg(script)
            .args(args)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{} failed:\n{}\n{stdout}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str(stdout.lines().last().expect("no report")).unwrap()
    }

    /// Another program (a client that starts the binary itself, as the Python SDK suites'
    /// scripts do) with this home's environment: `$LEGATE_HOME`, the options, stdin closed.
    pub fn program(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        c.env("LEGATE_HOME", self.home())
            .env_remove("LEGATE_LOG")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        for (key, value) in &self.env {
            match value {
                Some(v) => c.env(key, v),
                None => c.env_remove(key),
            };
        }
        c
    }

    /// Runs the binary with `args` to its end.
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// Runs the binary with `args` to its end, with `env` set for this command only.
    pub fn run_with(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.cmd(args).envs(env.iter().copied()).output().unwrap()
    }

    /// Starts the binary with `args`, its stdout and stderr piped.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.spawn_with(args, Stdio::piped)
    }

    /// Starts the binary with `args`, its stdout and stderr discarded.
    pub fn spawn_silent(&self, args: &[&str]) -> Child {
        self.spawn_with(args, Stdio::null)
    }

    fn spawn_with(&self, args: &[&str], output: fn() -> Stdio) -> Child {
        self.cmd(args)
            .stdout(output())
            .stderr(output())
            .spawn()
            .unwrap()
    }

    /// Starts `legate serve <args>` in this home with `LEGATE_LOG=warn`, and reads its banner.
    pub fn serve(&self, args: &[&str]) -> crate::served::Served {
        let mut command = self.cmd(&["serve"]);
        command.args(args).env("LEGATE_LOG", "warn");
        crate::served::Served::spawn(&mut command)
    }

    /// Like [`CliHome::serve`], with at most `open_files` descriptors: a shell sets the soft
    /// and hard limit (`ulimit -n`) and then becomes `legate serve` (`exec`), so the limit is
    /// the server's own from its start.
    pub fn serve_limited(&self, args: &[&str], open_files: u32) -> crate::served::Served {
        let mut command = self.program("sh");
        command
            .arg("-c")
            .arg(format!(
                "ulimit -n {open_files} && exec \"$0\" serve \"$@\""
            ))
            .arg(&self.bin)
            .args(args)
            .env("LEGATE_LOG", "warn");
        crate::served::Served::spawn(&mut command)
    }

    /// Starts `legate mcp` in this home with `LEGATE_LOG=debug` and `env`, and initializes a
    /// session over raw JSON-RPC lines; the client and `initialize`'s result.
    pub fn mcp_stdio(&self, env: &[(&str, &str)]) -> (crate::stdio::McpStdio, Value) {
        let mut command = self.cmd(&["mcp"]);
        command.env("LEGATE_LOG", "debug").envs(env.iter().copied());
        crate::stdio::McpStdio::start(&mut command)
    }

    /// Runs the binary with `args`, which must succeed, and parses its stdout as one JSON value.
    pub fn json(&self, args: &[&str]) -> Value {
        let out = self.run(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        parsed(&out)
    }

    /// `legate show --json id`.
    pub fn show(&self, id: &str) -> Value {
        self.json(&["show", "--json", id])
    }

    /// `legate tasks --json --limit 100`: one value per task, newest first.
    pub fn tasks_json(&self) -> Vec<Value> {
        self.json_lines(&["tasks", "--json", "--limit", "100"])
    }

    /// Runs the binary with `args`, which must succeed, and parses each line of its stdout
    /// as a JSON value.
    pub fn json_lines(&self, args: &[&str]) -> Vec<Value> {
        let out = self.run(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// `legate events id`: each line's event, with its sequence number as `seq`.
    pub fn events(&self, id: &str) -> Vec<Value> {
        let out = self.run(&["events", id]);
        assert!(out.status.success(), "{}", text(&out));
        event_lines(&out)
    }

    /// Waits (at most `limit`) until some task is in `state`; its id.
    pub fn wait_for_state(&self, state: &str, limit: Duration) -> String {
        crate::poll::until(limit, &format!("a task in state {state}"), || {
            if !self.home().join("legate.db").exists() {
                return None;
            }
            let task = self
                .tasks_json()
                .into_iter()
                .find(|t| t["state"] == state)?;
            Some(task["id"].as_str().unwrap().to_string())
        })
    }

    /// Writes `text` to `<base>/<name>`; its path.
    pub fn write(&self, name: &str, text: &str) -> String {
        let p = self.base.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    }
}

/// A `legate.toml` that configures the scripted agent as `scripted`, then `extra`.
pub fn scripted_config(extra: &str) -> String {
    let agent = legate_testkit::find_scripted_agent().expect("build legate-scripted-agent");
    format!(
        "[agents.scripted]\ncommand = {:?}\n{extra}",
        agent.display().to_string()
    )
}

/// Waits until each of `files` was last changed more than the scan verdict cache's racy
/// margin (a second) ago, so that a copy may record verdicts on them.
pub fn settle(files: &[PathBuf]) {
    use std::os::unix::fs::MetadataExt;
    use std::time::{Instant, SystemTime};
    let newest = files
        .iter()
        .map(|f| {
            let m = std::fs::metadata(f).unwrap();
            SystemTime::UNIX_EPOCH + Duration::new(m.ctime() as u64, m.ctime_nsec() as u32)
        })
        .max()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    // The margin is a second (`legate_workspace::RACY_MARGIN`).
    while SystemTime::now() < newest + Duration::from_millis(1050) {
        assert!(Instant::now() < deadline, "the clock does not move");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An output's status, stdout and stderr, for an assertion's message.
pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// An output's stdout and stderr, lossily decoded.
pub fn streams(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The events `legate events` printed on an output's stdout (`SEQ TIME JSON` lines): each
/// line's event, with its sequence number as `seq`.
pub fn event_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let json = &l[l.find('{').unwrap()..];
            let mut v: Value = serde_json::from_str(json).unwrap();
            let seq: u64 = l.split_whitespace().next().unwrap().parse().unwrap();
            v["seq"] = seq.into();
            v
        })
        .collect()
}

/// An output's stdout as one JSON value.
pub fn parsed(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
}

/// The id `legate run` printed on its `task <id>` line of stderr.
pub fn task_id(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.starts_with("task "))
        .expect("a task line");
    line.split_whitespace().nth(1).unwrap().to_string()
}

/// A child process killed when the test ends, whether it passed or not.
#[derive(Debug)]
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
