//! Legate's test commands: one command run in a copy under its confinement, and the evidence
//! it leaves.
//!
//! This crate owns running a test command (an executable and its arguments, never a shell)
//! with the copy as its working directory: `run` (the environment, the process group, the
//! timeout, bounded output and the one default confinement hook, [`confine`]),
//! `confinement` (a selected test's [`TestConfinement`]: extra read and write roots, the
//! network, child processes and output in characters, as the runner applies it) and `egress`
//! (a selected test's one way out, Legate's egress proxy served for as long as the command
//! runs, [`TestEgress`]).
//!
//! It never decides whether a selection is allowed (the engine checks it against the sandbox
//! policy first), never decides a connection (the gate it is given does), and never judges
//! what the evidence means for a review (the engine does). Workspaces and copies are
//! `legate-workspace`'s; "sandbox" there names a workspace kind, never a test's confinement.
//!
//! ```
//! use legate_testrun::{TestCommand, validate_test_command};
//!
//! let command = TestCommand { executable: "cargo".into(), args: vec!["test".into()] };
//! assert!(validate_test_command(&command).is_ok());
//! let empty = TestCommand { executable: String::new(), args: vec![] };
//! assert!(validate_test_command(&empty).is_err());
//! ```

mod confinement;
mod egress;
mod exit;
mod run;
mod sys;

pub use confinement::TestConfinement;
pub use egress::TestEgress;
pub use run::{
    Confined, DEFAULT_MAX_OUTPUT, DEFAULT_TIMEOUT, TestCommand, TestRun, confine, run_test_in,
    validate as validate_test_command,
};
