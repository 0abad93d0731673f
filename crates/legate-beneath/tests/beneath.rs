//! `Root` against hostile trees on the real file system, with both resolvers: symlinks
//! anywhere on the path, `..`, absolute paths, hard links, FIFOs; and a property test that
//! no path, however spelled, reaches outside the root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_beneath::{BeneathError, Kind, Resolver, Root};
use proptest::prelude::*;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

const CANARY: &[u8] = b"canary-8c1f0e2b outside the root\n";
const RESOLVERS: [Resolver; 2] = [Resolver::Openat2, Resolver::Walk];

/// `tmp/root` (with `file`, `dir/inner`, and links out and in) next to `tmp/outside` (a
/// `secret` holding the canary, and an empty `dir`).
struct Tree {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

fn tree() -> Tree {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let root = base.join("root");
    let outside = base.join("outside");
    std::fs::create_dir_all(root.join("dir")).unwrap();
    std::fs::create_dir_all(outside.join("dir")).unwrap();
    std::fs::write(outside.join("secret"), CANARY).unwrap();
    std::fs::write(root.join("file"), b"inside\n").unwrap();
    std::fs::write(root.join("dir/inner"), b"inner\n").unwrap();
    symlink(outside.join("secret"), root.join("link_out")).unwrap();
    symlink(outside.join("dir"), root.join("dir_out")).unwrap();
    symlink(root.join("file"), root.join("link_in")).unwrap();
    symlink("dir", root.join("dir_in")).unwrap();
    symlink("../outside/secret", root.join("dir/rel_out")).unwrap();
    symlink("/proc/self/root/etc/hostname", root.join("magic")).unwrap();
    Tree {
        _tmp: tmp,
        root,
        outside,
    }
}

/// Every file under `dir` with its bytes, symlinks as their targets.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&d).unwrap().flatten().collect();
        entries.sort_by_key(std::fs::DirEntry::path);
        for entry in entries {
            let path = entry.path();
            let ty = entry.file_type().unwrap();
            if ty.is_dir() {
                out.push((path.clone(), b"<dir>".to_vec()));
                stack.push(path);
            } else if ty.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.push((path, target.into_os_string().into_encoded_bytes()));
            } else {
                out.push((path.clone(), std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

#[test]
fn plain_files_read_write_and_parents() {
    for resolver in RESOLVERS {
        let t = tree();
        let root = Root::open_with(&t.root, resolver).unwrap();
        assert_eq!(root.read(Path::new("file"), 100).unwrap(), b"inside\n");
        assert_eq!(
            root.read(Path::new("./dir//inner"), 100).unwrap(),
            b"inner\n"
        );
        assert_eq!(
            root.read(Path::new("dir/../file"), 100).unwrap(),
            b"inside\n"
        );
        root.write(Path::new("new/deep/a.txt"), b"a\n", true)
            .unwrap();
        assert_eq!(
            std::fs::read(t.root.join("new/deep/a.txt")).unwrap(),
            b"a\n"
        );
        assert!(
            root.write(Path::new("other/b.txt"), b"b", false)
                .unwrap_err()
                .is_not_found()
        );
        root.write(Path::new("file"), b"replaced\n", false).unwrap();
        assert_eq!(std::fs::read(t.root.join("file")).unwrap(), b"replaced\n");
        root.create_dir_all(Path::new("x/y/z")).unwrap();
        assert!(t.root.join("x/y/z").is_dir());
        assert_eq!(
            root.kind(Path::new("link_out")).unwrap(),
            Some(Kind::Symlink)
        );
        assert_eq!(root.kind(Path::new("dir")).unwrap(), Some(Kind::Directory));
        assert_eq!(root.kind(Path::new("nope")).unwrap(), None);
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(&t.root)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!names.iter().any(|n| n.contains(".tmp")), "{names:?}");
    }
}

#[test]
fn every_symlink_is_refused_wherever_it_points() {
    for resolver in RESOLVERS {
        let t = tree();
        let before = snapshot(&t.outside);
        let root = Root::open_with(&t.root, resolver).unwrap();
        for path in [
            "link_out",
            "link_in",
            "dir_out/x",
            "dir_in/inner",
            "dir/rel_out",
            "magic",
        ] {
            let err = root.read(Path::new(path), 1 << 20).unwrap_err();
            assert!(
                matches!(err, BeneathError::Symlink { .. }),
                "{resolver:?} read {path}: {err}"
            );
            let err = root.write(Path::new(path), b"pwned", true).unwrap_err();
            assert!(
                matches!(err, BeneathError::Symlink { .. }),
                "{resolver:?} write {path}: {err}"
            );
        }
        for dir in ["dir_out/new", "dir_in/new"] {
            let err = root.create_dir(Path::new(dir), 0o700).unwrap_err();
            assert!(
                matches!(err, BeneathError::Symlink { .. }),
                "{resolver:?} create_dir {dir}: {err}"
            );
        }
        root.create_dir(Path::new("dir/fresh"), 0o700).unwrap();
        assert!(t.root.join("dir/fresh").is_dir());
        let again = root.create_dir(Path::new("link_out"), 0o700).unwrap_err();
        assert_eq!(
            again.io_error().unwrap().kind(),
            std::io::ErrorKind::AlreadyExists
        );
        for dir in ["dir_out/new", "dir_in/new", "dir_out"] {
            let err = root.create_dir_all(Path::new(dir)).unwrap_err();
            assert!(
                matches!(err, BeneathError::Symlink { .. }),
                "{resolver:?} mkdir {dir}: {err}"
            );
        }
        assert_eq!(snapshot(&t.outside), before, "{resolver:?}");
        // The links themselves are untouched.
        assert!(
            std::fs::symlink_metadata(t.root.join("link_out"))
                .unwrap()
                .is_symlink()
        );
    }
}

#[test]
fn leaving_the_root_by_text_is_refused() {
    for resolver in RESOLVERS {
        let t = tree();
        let root = Root::open_with(&t.root, resolver).unwrap();
        for path in [
            "..",
            "../outside/secret",
            "dir/../../outside/secret",
            "a/../../x",
        ] {
            let err = root.read(Path::new(path), 100).unwrap_err();
            assert!(matches!(err, BeneathError::Escapes { .. }), "{path}: {err}");
            assert!(err.is_refusal());
        }
        let abs = t.outside.join("secret");
        assert!(matches!(
            root.read(&abs, 100),
            Err(BeneathError::Absolute { .. })
        ));
        assert!(matches!(
            root.relative(&abs),
            Err(BeneathError::NotUnderRoot { .. })
        ));
        assert_eq!(
            root.relative(&t.root.join("dir/inner")).unwrap(),
            Path::new("dir/inner")
        );
    }
}

#[test]
fn a_hard_link_at_the_target_is_replaced_not_written_through() {
    for resolver in RESOLVERS {
        let t = tree();
        std::fs::hard_link(t.outside.join("secret"), t.root.join("hard")).unwrap();
        let root = Root::open_with(&t.root, resolver).unwrap();
        root.write(Path::new("hard"), b"mine\n", false).unwrap();
        assert_eq!(std::fs::read(t.outside.join("secret")).unwrap(), CANARY);
        assert_eq!(std::fs::read(t.root.join("hard")).unwrap(), b"mine\n");
    }
}

#[test]
fn kinds_sizes_and_modes() {
    for resolver in RESOLVERS {
        let t = tree();
        let root = Root::open_with(&t.root, resolver).unwrap();
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            t.root.join("fifo"),
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        // A FIFO does not hang the reader (O_NONBLOCK) and is not read.
        assert!(matches!(
            root.read(Path::new("fifo"), 100),
            Err(BeneathError::NotRegular { .. })
        ));
        assert!(matches!(
            root.write(Path::new("fifo"), b"x", false),
            Err(BeneathError::NotRegular { .. })
        ));
        assert!(matches!(
            root.read(Path::new("dir"), 100),
            Err(BeneathError::IsDirectory { .. })
        ));
        assert!(matches!(
            root.write(Path::new("dir"), b"x", false),
            Err(BeneathError::IsDirectory { .. })
        ));
        assert!(matches!(
            root.write(Path::new(""), b"x", false),
            Err(BeneathError::IsDirectory { .. })
        ));
        assert!(matches!(
            root.read(Path::new("file"), 3),
            Err(BeneathError::TooLarge { max: 3, .. })
        ));
        std::fs::set_permissions(t.root.join("file"), std::fs::Permissions::from_mode(0o750))
            .unwrap();
        root.write(Path::new("file"), b"x", false).unwrap();
        let mode = std::fs::metadata(t.root.join("file"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o750);
    }
}

#[test]
fn the_kernel_resolver_is_used_where_it_exists() {
    let t = tree();
    let root = Root::open(&t.root).unwrap();
    // This machine's kernel has openat2 (5.6+); the walk is the fallback only.
    assert_eq!(root.resolver(), Resolver::Openat2);
}

fn component() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "..", ".", "", "file", "dir", "inner", "link_out", "link_in", "dir_out", "dir_in",
        "rel_out", "magic", "secret", "outside", "new",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever relative path is asked for, with either resolver, nothing outside the root is
    /// read, written or made.
    #[test]
    fn no_path_reaches_outside_the_root(
        parts in prop::collection::vec(component(), 1..7),
        walk in any::<bool>(),
    ) {
        let t = tree();
        let before = snapshot(&t.outside);
        let resolver = if walk { Resolver::Walk } else { Resolver::Openat2 };
        let root = Root::open_with(&t.root, resolver).unwrap();
        let rel: PathBuf = parts.join("/").into();
        if let Ok(bytes) = root.read(&rel, 1 << 20) {
            prop_assert_ne!(bytes, CANARY.to_vec());
        }
        if let Ok((mut f, _)) = root.open_file(&rel) {
            let mut s = Vec::new();
            std::io::Read::read_to_end(&mut f, &mut s).unwrap();
            prop_assert_ne!(s, CANARY.to_vec());
        }
        let _ = root.write(&rel, b"pwned", true);
        let _ = root.create_dir_all(&rel.join("made"));
        let _ = root.kind(&rel);
        prop_assert_eq!(snapshot(&t.outside), before);
        // Whatever was written or made is beneath the root, on a path without symlinks.
        for (path, bytes) in snapshot(&t.root) {
            if bytes == b"pwned" || path.ends_with("made") {
                let canon = std::fs::canonicalize(&path).unwrap();
                prop_assert!(canon.starts_with(&t.root), "{}", canon.display());
            }
        }
    }
}
