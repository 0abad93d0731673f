//! The files' side: `$LEGATE_HOME` (who owns it, who may read it, the disk under it) and each
//! token file (mode `0600`, owned by this user).
//!
//! Only metadata is read: never a token's contents.
#![allow(unsafe_code)]

use crate::{Check, Status};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// Below this much free space under the home, a copy task may not fit: a failure.
const DISK_FAIL_BYTES: u64 = 1 << 30;
/// Below this much, a warning: every copy costs its whole tree.
const DISK_WARN_BYTES: u64 = 5 << 30;

fn euid() -> u32 {
    // SAFETY: `geteuid` has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The home's checks: its owner and mode, and the disk under it (nothing when it does not
/// exist yet: Legate makes it, `0700`, on first use).
pub(crate) fn home(home: &Path) -> Vec<Check> {
    let Ok(meta) = std::fs::metadata(home) else {
        return vec![Check::ok(
            "home",
            format!(
                "{} does not exist yet; Legate makes it on first use",
                home.display()
            ),
        )];
    };
    let shown = home.display();
    let mode = meta.permissions().mode() & 0o777;
    let owner = if meta.uid() != euid() {
        Check::problem(
            Status::Fail,
            "home",
            format!("{shown} belongs to user {}, not to this user", meta.uid()),
            format!("use a home of your own (LEGATE_HOME), or `chown -R $(id -u) {shown}`"),
        )
    } else if mode & 0o022 != 0 {
        Check::problem(
            Status::Fail,
            "home",
            format!(
                "{shown} is writable by others (mode {mode:04o}): its tasks, tokens and copies with it"
            ),
            format!("chmod 700 {shown}"),
        )
    } else if mode & 0o077 != 0 {
        Check::problem(
            Status::Warn,
            "home",
            format!(
                "{shown} is readable by others (mode {mode:04o}): its tasks' records and copies with it"
            ),
            format!("chmod 700 {shown}"),
        )
    } else {
        Check::ok("home", format!("{shown} is yours alone (mode {mode:04o})"))
    };
    vec![owner, disk(home, free_bytes(home))]
}

/// The disk check from the bytes free under `home` (`None`: could not be read).
fn disk(home: &Path, free: Option<u64>) -> Check {
    let Some(free) = free else {
        return Check::problem(
            Status::Warn,
            "disk",
            format!("the free space under {} could not be read", home.display()),
            "check the file system with `df -h`",
        );
    };
    let gib = free as f64 / f64::from(1u32 << 30);
    let found = format!("{gib:.1} GiB free under {}", home.display());
    if free < DISK_FAIL_BYTES {
        Check::problem(
            Status::Fail,
            "disk",
            found,
            "free space, or `legate cleanup` to remove what ended tasks left (copies, sandboxes)",
        )
    } else if free < DISK_WARN_BYTES {
        Check::problem(
            Status::Warn,
            "disk",
            found,
            "every copy task takes its whole tree's size: `legate cleanup` removes what ended tasks left",
        )
    } else {
        Check::ok("disk", found)
    }
}

fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `statvfs` writes into the zeroed struct it is given; `c` is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Token file `label` at `path`: `None` when it does not exist (made `0600` on first use).
pub(crate) fn token_file(label: &str, path: &Path) -> Option<Check> {
    let meta = std::fs::metadata(path).ok()?;
    let name = format!("token file {label}");
    let shown = path.display();
    let mode = meta.permissions().mode() & 0o777;
    Some(if meta.uid() != euid() {
        Check::problem(
            Status::Fail,
            name,
            format!("{shown} belongs to user {}, not to this user", meta.uid()),
            format!("remove it (a new one is made) or `chown $(id -u) {shown}`"),
        )
    } else if mode & 0o077 != 0 {
        Check::problem(
            Status::Fail,
            name,
            format!(
                "{shown} can be read by others (mode {mode:04o}): anyone who reads it can call Legate"
            ),
            format!("chmod 600 {shown}, then replace the token: anyone may have read it"),
        )
    } else {
        Check::ok(name, format!("{shown} is yours alone (mode {mode:04o})"))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_token_file_anyone_may_read_fails_and_a_missing_one_is_not_checked() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("mcp-token");
        assert!(token_file("mcp", &f).is_none());
        std::fs::write(&f, "secret-value").unwrap();
        chmod(&f, 0o600);
        assert_eq!(token_file("mcp", &f).unwrap().status, Status::Ok);
        chmod(&f, 0o644);
        let c = token_file("mcp", &f).unwrap();
        assert_eq!(c.status, Status::Fail);
        assert!(c.fix.as_deref().unwrap().starts_with("chmod 600"));
        assert!(!format!("{c:?}").contains("secret-value"));
    }

    #[test]
    fn a_home_open_to_others_is_reported_with_its_fix() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("h");
        assert_eq!(super::home(&home)[0].status, Status::Ok);
        std::fs::create_dir(&home).unwrap();
        chmod(&home, 0o700);
        assert_eq!(super::home(&home)[0].status, Status::Ok);
        chmod(&home, 0o755);
        assert_eq!(super::home(&home)[0].status, Status::Warn);
        chmod(&home, 0o777);
        let c = &super::home(&home)[0];
        assert_eq!(c.status, Status::Fail);
        assert_eq!(
            c.fix.as_deref(),
            Some(&*format!("chmod 700 {}", home.display()))
        );
    }

    #[test]
    fn little_disk_warns_and_almost_none_fails() {
        let p = Path::new("/h");
        assert_eq!(disk(p, Some(100 << 30)).status, Status::Ok);
        assert_eq!(disk(p, Some(2 << 30)).status, Status::Warn);
        assert_eq!(disk(p, Some(10 << 20)).status, Status::Fail);
        assert_eq!(disk(p, None).status, Status::Warn);
        assert!(free_bytes(Path::new("/")).is_some());
    }
}
