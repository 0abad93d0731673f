//! Checking one root a caller names, for the sandbox policy's ceiling or a test's selection:
//! absolute, canonical, an existing directory reached without a link, not `/`, and clear of
//! every protected path (Legate's home and hidden files, credentials directories, kernel
//! pseudo-filesystems, forbidden directories, and for a selection the source project): a
//! root may be neither inside a protected path nor contain one.
//!
//! This module owns that check and the list of protected paths. It never opens a file for
//! reading or writing, and never decides whether a root is within the ceiling.

use legate_core::{Error, ErrorCode, Result};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// The longest root accepted, in bytes (Linux's `PATH_MAX`).
pub(crate) const MAX_ROOT_BYTES: usize = 4096;

/// Credentials directories and files beneath the user's home that no root may be or contain.
const CREDENTIALS: &[&str] = &[
    ".ssh",
    ".aws",
    ".gnupg",
    ".config/gcloud",
    ".azure",
    ".kube",
    ".docker",
    ".config/gh",
    ".password-store",
    ".local/share/keyrings",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".terraform.d",
    ".vault-token",
];

/// Kernel pseudo-filesystems: never a root (a write root there writes the kernel's knobs).
const PSEUDO: &[&str] = &["/proc", "/sys", "/dev"];

/// The system's own directories: never a write root (a test could then change what every
/// process on the machine runs or trusts: `/etc`, a program in `/usr/local/bin`).
const SYSTEM: &[&str] = &[
    "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/var/lib",
    "/var/log",
];

/// The paths no root may touch, each with what it is (for the error).
#[derive(Debug, Clone, Default)]
pub(crate) struct Protected {
    paths: Vec<(PathBuf, &'static str)>,
}

impl Protected {
    /// Legate's home and hidden paths, `forbidden` (the configuration's forbidden
    /// directories), the credentials beneath `user_home`, and the pseudo-filesystems.
    pub(crate) fn new(legate: &[PathBuf], forbidden: &[PathBuf], user_home: Option<&Path>) -> Self {
        let mut p = Self::default();
        for l in legate {
            p.add(l, "Legate's home or one of its hidden files");
        }
        for f in forbidden {
            p.add(f, "a forbidden directory");
        }
        if let Some(home) = user_home {
            for c in CREDENTIALS {
                p.add(&home.join(c), "a credentials directory");
            }
        }
        for d in PSEUDO {
            p.add(Path::new(d), "a kernel pseudo-filesystem");
        }
        p
    }

    /// For write roots: also the system's directories and the directory holding Legate's own
    /// binary (issue 29, finding 5: a test wrote into `/etc`).
    pub(crate) fn for_writes(mut self) -> Self {
        for d in SYSTEM {
            self.add(Path::new(d), "a system directory");
        }
        if let Some(dir) = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(Path::to_path_buf))
        {
            self.add(&dir, "the directory holding Legate's own binary");
        }
        self
    }

    /// Also the source project of the test's copy.
    pub(crate) fn with_source(mut self, source: &Path) -> Self {
        self.add(source, "the source project");
        self
    }

    /// Adds `path` as given and, when it resolves elsewhere, as resolved.
    fn add(&mut self, path: &Path, what: &'static str) {
        self.paths.push((path.to_path_buf(), what));
        if let Ok(real) = std::fs::canonicalize(path)
            && real != path
        {
            self.paths.push((real, what));
        }
    }

    /// What `root` touches, if anything.
    fn touched_by(&self, root: &Path) -> Option<(&Path, &'static str)> {
        self.paths
            .iter()
            .find(|(p, _)| root.starts_with(p) || p.starts_with(root))
            .map(|(p, what)| (p.as_path(), *what))
    }
}

/// What is wrong with a root's spelling alone (no file system access), if anything.
pub(crate) fn syntax_problem(raw: &Path) -> Option<&'static str> {
    let bytes = raw.as_os_str().as_bytes();
    if bytes.is_empty() {
        return Some("is empty");
    }
    if bytes.contains(&0) {
        return Some("contains a NUL byte");
    }
    if bytes.len() > MAX_ROOT_BYTES {
        return Some("is longer than 4096 bytes");
    }
    if !raw.is_absolute() {
        return Some("is not absolute");
    }
    // `Path::components` drops `.` and repeated slashes: look at the bytes for them.
    if bytes
        .split(|b| *b == b'/')
        .skip(1)
        .any(|c| c == b"." || c == b"..")
        || raw.components().any(|c| matches!(c, Component::ParentDir))
    {
        return Some("has a `.` or `..` component");
    }
    if raw.components().all(|c| matches!(c, Component::RootDir)) {
        return Some("is `/`");
    }
    None
}

/// Checks `raw` (named by the caller as `field`) and returns it canonical. Every failure is
/// `code` but for a forbidden directory, which is `FORBIDDEN_DIRECTORY`.
pub(crate) fn check_root(
    raw: &Path,
    field: &str,
    protected: &Protected,
    code: ErrorCode,
) -> Result<PathBuf> {
    let shown = shown(raw);
    let refuse = |why: &str| Error::new(code, format!("{field} {shown} {why}"));
    if let Some(why) = syntax_problem(raw) {
        return Err(refuse(why));
    }
    // Here and below the cause's words sit inside the sentence, in parentheses; it is kept as
    // the source.
    let meta = std::fs::symlink_metadata(raw).map_err(|e| {
        Error::quoting_between(code, format!("{field} {shown} cannot be read ("), e, ")")
    })?;
    if meta.file_type().is_symlink() {
        return Err(refuse("is a symbolic link; name the directory itself"));
    }
    if !meta.is_dir() {
        return Err(refuse("is not a directory"));
    }
    let real = std::fs::canonicalize(raw).map_err(|e| {
        Error::quoting_between(
            code,
            format!("{field} {shown} cannot be resolved ("),
            e,
            ")",
        )
    })?;
    if real != raw {
        return Err(refuse(&format!(
            "is not canonical: a link on the way leads to {}",
            self::shown(&real)
        )));
    }
    if let Some((p, what)) = protected.touched_by(&real) {
        let code = if what == "a forbidden directory" {
            ErrorCode::ForbiddenDirectory
        } else {
            code
        };
        return Err(Error::new(
            code,
            format!(
                "{field} {shown} {} {what} ({})",
                if real.starts_with(p) {
                    "lies in"
                } else {
                    "contains"
                },
                self::shown(p)
            ),
        ));
    }
    Ok(real)
}

/// A path for an error sentence: lossy, control characters escaped, at most 200 characters.
fn shown(p: &Path) -> String {
    let s: String = String::from_utf8_lossy(OsStr::as_bytes(p.as_os_str()))
        .chars()
        .flat_map(char::escape_debug)
        .take(200)
        .collect();
    format!("`{s}`")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn code(r: Result<PathBuf>) -> ErrorCode {
        r.unwrap_err().code
    }

    #[test]
    fn roots_touching_protected_paths_links_and_slash_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().canonicalize().unwrap();
        let home = base.join("legate-home");
        let user = base.join("user");
        let forbidden = base.join("forbidden");
        for p in [&home, &user.join(".ssh"), &forbidden, &base.join("ok/deep")] {
            std::fs::create_dir_all(p).unwrap();
        }
        std::os::unix::fs::symlink(base.join("ok"), base.join("link")).unwrap();
        let prot = Protected::new(
            std::slice::from_ref(&home),
            std::slice::from_ref(&forbidden),
            Some(&user),
        );
        let denied = ErrorCode::SandboxSelectionDenied;
        let check = |p: &Path| check_root(p, "root", &prot, denied);
        assert_eq!(check(&base.join("ok")).unwrap(), base.join("ok"));
        assert_eq!(check(&base.join("ok/deep")).unwrap(), base.join("ok/deep"));
        assert_eq!(code(check(&home)), denied);
        assert_eq!(code(check(&home.join("x"))), denied, "missing beneath home");
        assert_eq!(code(check(&base)), denied, "contains Legate's home");
        assert_eq!(code(check(&user)), denied, "contains ~/.ssh");
        assert_eq!(code(check(&user.join(".ssh"))), denied);
        assert_eq!(code(check(&forbidden)), ErrorCode::ForbiddenDirectory);
        assert_eq!(code(check(&base.join("link"))), denied, "a link");
        assert_eq!(
            code(check(&base.join("link/deep"))),
            denied,
            "a link on the way"
        );
        assert_eq!(code(check(Path::new("/"))), denied);
        assert_eq!(code(check(Path::new("/proc/self"))), denied);
        assert_eq!(code(check(Path::new("relative"))), denied);
        assert_eq!(code(check(&base.join("ok/../ok"))), denied);
        assert_eq!(code(check(&base.join("ok/./deep"))), denied);
        let src = Protected::new(&[], &[], None).with_source(&base.join("ok"));
        assert_eq!(
            code(check_root(&base.join("ok/deep"), "root", &src, denied)),
            denied
        );
    }

    proptest! {
        /// Whatever a caller names, a spelling that passes is absolute, not `/`, and free of
        /// `.`, `..` and NUL, so that canonical comparison means what it says.
        #[test]
        fn a_spelling_that_passes_is_absolute_and_plain(s in "[/a.\\x00b]{0,12}") {
            let p = Path::new(&s);
            if syntax_problem(p).is_none() {
                prop_assert!(s.starts_with('/'));
                prop_assert!(!s.contains('\0'));
                prop_assert!(s.split('/').all(|c| c != "." && c != ".."));
                prop_assert!(p.components().count() > 1);
            }
        }
    }
}
