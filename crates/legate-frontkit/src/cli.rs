//! The `legate` binary in a test: [`CliHome`] is a temporary directory whose `home/` is the
//! `$LEGATE_HOME` every command runs with, and [`KillOnDrop`] a process that must not outlive
//! its test. Owns how a test runs the binary (its environment, stdin closed); it never
//! checks what the binary printed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// A temporary directory, `$LEGATE_HOME` at `<dir>/home`, and the `legate` binary run in it
/// with `LEGATE_LOG` and `RUST_LOG` unset and stdin closed.
#[derive(Debug)]
pub struct CliHome {
    dir: tempfile::TempDir,
    base: PathBuf,
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
            dir,
            base,
            bin: bin.as_ref().to_path_buf(),
            env: Vec::new(),
        }
    }

    /// A fresh directory whose home holds `legate.toml` = `config`.
    pub fn with_config(bin: impl AsRef<Path>, config: &str) -> Self {
        let home = Self::new(bin);
        std::fs::create_dir_all(home.home()).unwrap();
        std::fs::write(home.home().join("legate.toml"), config).unwrap();
        home
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

    /// The directory as created (the home is `home/` in it).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The directory, resolved.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// `$LEGATE_HOME`: `<dir>/home`.
    pub fn home(&self) -> PathBuf {
        self.path().join("home")
    }

    /// The binary with `args`, ready to run in this home.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.args(args)
            .env("LEGATE_HOME", self.home())
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

    /// Starts the binary with `args`, its stdout and stderr piped.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.cmd(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
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

/// An output's status, stdout and stderr, for an assertion's message.
pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
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
