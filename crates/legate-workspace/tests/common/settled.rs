//! What the scan verdict cache's tests share: a planted credential, and waiting until a
//! project's files are old enough for a copy to record verdicts on them.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use legate_workspace::RACY_MARGIN;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

/// A fake key id, made at run time (a real one has no run of letters in order).
pub fn leak() -> String {
    format!("{}{}", "AKIA", "Q3ZL7RTX2WNVD6KM")
}

/// Waits until every file under `dir` was last changed more than the racy margin ago (by
/// the clock the file system stamps with), so that a copy may record verdicts on them.
pub fn settle(dir: &Path) {
    let newest = newest_ctime(dir);
    let deadline = Instant::now() + Duration::from_secs(30);
    while SystemTime::now() < newest + RACY_MARGIN + Duration::from_millis(50) {
        assert!(Instant::now() < deadline, "the clock does not move");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn newest_ctime(dir: &Path) -> SystemTime {
    let mut newest = SystemTime::UNIX_EPOCH;
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let m = fs::symlink_metadata(e.path()).unwrap();
        if e.file_name() == ".git" {
            continue;
        }
        let at = SystemTime::UNIX_EPOCH + Duration::new(m.ctime() as u64, m.ctime_nsec() as u32);
        newest = newest.max(at);
        if m.is_dir() {
            newest = newest.max(newest_ctime(&e.path()));
        }
    }
    newest
}
