//! The scan verdict cache: a copy of an unchanged project trusts the verdicts the previous
//! copy recorded and reads no file's content; any change a verdict could outlive (a rewrite
//! with the mtime put back, a write through a shared mapping, a file just written, other
//! rules, a damaged cache file, a file system that does not move times on every write) is
//! read and scanned again.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// The shared-mapping test maps a file itself (`mmap`), as an editor or a database would.
#![allow(unsafe_code)]

mod common;
#[path = "common/reflink_fs.rs"]
mod reflink_fs;
#[path = "common/settled.rs"]
mod settled;

use common::{Fixture, git};
use legate_workspace::*;
use settled::{leak, settle};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn state(f: &Fixture) -> PathBuf {
    f.home.join("scan-verdicts")
}

/// A copy as the engine makes it, with the project's verdict cache, as task `name`.
fn copy_with(f: &Fixture, name: &str, secrets: &SecretPatterns) -> CopyReport {
    let limits = CopyLimits::default();
    let sel = select(&f.project, &[], secrets, &limits).unwrap();
    let cache = ScanCache::open(&state(f), &sel.root, secrets);
    make_copy_with_baseline_cached(
        &sel,
        &f.home.join("copies").join(name),
        &f.home.join("baselines").join(name),
        &limits,
        Some(&cache),
    )
    .unwrap()
    .0
}

fn copy(f: &Fixture, name: &str) -> CopyReport {
    copy_with(f, name, &SecretPatterns::default())
}

/// A committed project of `n` small files, one of them holding a credential, on the file
/// system `dir` is on; settled.
fn project_in(dir: &Path, n: usize) -> Fixture {
    let texts: Vec<(String, Vec<u8>)> = (0..n)
        .map(|i| {
            (
                format!("src/f{i:03}.txt"),
                format!("text {i}\n").into_bytes(),
            )
        })
        .collect();
    let mut files: Vec<(&str, &[u8])> = texts
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    let leaky = format!("key = {}\n", leak());
    files.push(("config/leak.txt", leaky.as_bytes()));
    let f = Fixture::new_in(dir, &files);
    f.commit_all();
    settle(&f.project);
    f
}

fn project(n: usize) -> Fixture {
    project_in(&std::env::temp_dir(), n)
}

fn blocked(r: &CopyReport) -> Vec<(&str, &str)> {
    r.blocked_files
        .iter()
        .map(|b| (b.path.as_str(), b.reason.as_str()))
        .collect()
}

#[test]
fn a_second_copy_of_an_unchanged_project_reads_no_file_content() {
    let f = project(20);
    let first = copy(&f, "t1");
    assert_eq!(first.included_files, 20);
    assert_eq!((first.scanned_files, first.trusted_files), (21, 0));
    let second = copy(&f, "t2");
    assert_eq!(
        (second.scanned_files, second.trusted_files),
        (0, 21),
        "{second:?}"
    );
    // The same copy: the same files, byte for byte, the credential left out for the same
    // reason.
    assert_eq!(second.included_files, 20);
    assert_eq!(blocked(&second), [("config/leak.txt", "SECRET_CONTENT")]);
    assert_eq!(second.blocked_files, first.blocked_files);
    for i in 0..20 {
        let p = format!("src/f{i:03}.txt");
        assert_eq!(
            fs::read(second.copy_directory.join(&p)).unwrap(),
            fs::read(f.project.join(&p)).unwrap()
        );
    }
    assert!(!second.copy_directory.join("config/leak.txt").exists());
}

#[test]
fn a_file_rewritten_with_its_size_and_mtime_kept_is_scanned_again() {
    let f = project(5);
    let path = f.project.join("src/f001.txt");
    fs::write(&path, vec![b'x'; 64]).unwrap();
    settle(&f.project);
    copy(&f, "t1");
    let recorded = copy(&f, "t2");
    assert_eq!(recorded.scanned_files, 0, "{recorded:?}");
    let kept = fs::metadata(&path).unwrap();
    let mut planted = format!("key = {}\n", leak()).into_bytes();
    planted.resize(64, b' ');
    fs::write(&path, &planted).unwrap();
    // utimensat: the mtime put back as it was; only the ctime tells.
    fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(kept.modified().unwrap())
        .unwrap();
    let now = fs::metadata(&path).unwrap();
    assert_eq!(
        (now.len(), now.mtime(), now.mtime_nsec(), now.ino()),
        (kept.len(), kept.mtime(), kept.mtime_nsec(), kept.ino())
    );
    let third = copy(&f, "t3");
    assert_eq!(third.scanned_files, 1, "{third:?}");
    assert!(
        blocked(&third).contains(&("src/f001.txt", "SECRET_CONTENT")),
        "{third:?}"
    );
    assert!(!third.copy_directory.join("src/f001.txt").exists());
}

#[test]
fn a_file_just_written_is_scanned_by_the_next_copy_too() {
    let f = project(5);
    for attempt in 0.. {
        let path = f.project.join(format!("fresh{attempt}.txt"));
        let t = Instant::now();
        fs::write(&path, b"just written\n").unwrap();
        let first = copy(&f, &format!("a{attempt}"));
        if t.elapsed() >= RACY_MARGIN - Duration::from_millis(100) {
            // The machine was too slow to copy within the margin: the file was no longer
            // racily clean when it was measured. Try again.
            assert!(attempt < 5, "five copies took longer than the margin");
            continue;
        }
        assert!(first.scanned_files >= 1);
        let second = copy(&f, &format!("b{attempt}"));
        assert_eq!(second.scanned_files, 1, "only the fresh file: {second:?}");
        break;
    }
}

#[test]
fn other_exclusions_or_exceptions_invalidate_every_verdict() {
    let f = project(5);
    copy(&f, "t1");
    assert_eq!(copy(&f, "t2").scanned_files, 0);
    let excl = SecretPatterns::new(&["nothing/**".into()], &[]).unwrap();
    let r = copy_with(&f, "t3", &excl);
    assert_eq!((r.scanned_files, r.trusted_files), (6, 0), "{r:?}");
    let exc = SecretPatterns::new(&[], &["nothing/**".into()]).unwrap();
    let r = copy_with(&f, "t4", &exc);
    assert_eq!((r.scanned_files, r.trusted_files), (6, 0), "{r:?}");
    // And the cache follows the patterns in use.
    assert_eq!(copy_with(&f, "t5", &exc).scanned_files, 0);
}

/// The one cache file of the fixture's project.
fn cache_file(f: &Fixture) -> PathBuf {
    let dirs: Vec<PathBuf> = fs::read_dir(state(f))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1);
    let mode = fs::metadata(&dirs[0]).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o700);
    let file = dirs[0].join("verdicts");
    assert_eq!(fs::metadata(&file).unwrap().mode() & 0o777, 0o600);
    file
}

#[test]
fn a_damaged_cache_file_is_ignored_and_every_file_scanned() {
    let f = project(5);
    copy(&f, "t1");
    let file = cache_file(&f);
    let whole = fs::read(&file).unwrap();
    assert!(
        !String::from_utf8_lossy(&whole).contains(&leak()),
        "no content in the cache"
    );
    let mut flipped = whole.clone();
    let at = whole.len() - 10;
    flipped[at] ^= 0x01;
    let damaged: [(&str, Vec<u8>); 4] = [
        ("truncated", whole[..whole.len() / 2].to_vec()),
        ("one byte changed", flipped),
        ("empty", Vec::new()),
        ("foreign", b"legate-scan-verdicts 9 00\n{}".to_vec()),
    ];
    for (i, (what, bytes)) in damaged.into_iter().enumerate() {
        fs::write(&file, &bytes).unwrap();
        let r = copy(&f, &format!("d{i}"));
        assert_eq!((r.scanned_files, r.trusted_files), (6, 0), "{what}: {r:?}");
        assert_eq!(r.included_files, 5, "{what}");
        // The copy wrote a good one again.
        assert_eq!(copy(&f, &format!("e{i}")).scanned_files, 0, "{what}");
    }
}

/// Maps `path` shared and writable, and writes `bytes` at its start through the mapping,
/// with no `msync`; the mapping stays until the returned guard drops.
struct Mapped {
    at: *mut libc::c_void,
    len: usize,
}

impl Mapped {
    fn new(path: &Path) -> Self {
        use std::os::fd::AsRawFd;
        let file = fs::File::options()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let len = file.metadata().unwrap().len() as usize;
        // SAFETY: a fresh mapping of an open file, of its length; the kernel picks the place.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(at, libc::MAP_FAILED);
        Self { at, len }
    }

    fn write(&self, bytes: &[u8]) {
        assert!(bytes.len() <= self.len);
        // SAFETY: within the mapping made above, which lives as long as `self`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.at.cast(), bytes.len()) };
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.at, self.len) };
    }
}

/// A file kept mapped and written through the mapping (its page dirty and writable) before
/// a copy records it, then written again through the same mapping: the second copy must
/// scan it. Without the write-back before the record the page stays writable, the second
/// write moves no time, and the key still matches.
fn a_write_through_a_shared_mapping_is_caught(dir: &Path) {
    let f = project_in(dir, 5);
    let path = f.project.join("src/f002.txt");
    fs::write(&path, vec![b' '; 64]).unwrap();
    let map = Mapped::new(&path);
    map.write(b"harmless");
    settle(&f.project);
    let first = copy(&f, "t1");
    assert!(
        !blocked(&first).contains(&("src/f002.txt", "SECRET_CONTENT")),
        "{first:?}"
    );
    let recorded = copy(&f, "t2");
    assert_eq!(recorded.scanned_files, 0, "recorded: {recorded:?}");
    map.write(format!("key = {}\n", leak()).as_bytes());
    let after = copy(&f, "t3");
    assert!(
        blocked(&after).contains(&("src/f002.txt", "SECRET_CONTENT")),
        "{after:?}"
    );
    assert!(!after.copy_directory.join("src/f002.txt").exists());
    drop(map);
}

#[test]
fn a_write_through_a_shared_mapping_is_caught_here() {
    a_write_through_a_shared_mapping_is_caught(&std::env::temp_dir());
}

#[test]
fn a_write_through_a_shared_mapping_is_caught_on_a_reflink_file_system() {
    let Some(xfs) = reflink_fs::ReflinkFs::mount(300) else {
        return;
    };
    a_write_through_a_shared_mapping_is_caught(xfs.path());
    // And a trusted copy there is made of clones.
    let f = project_in(xfs.path(), 5);
    copy(&f, "t1");
    let r = copy(&f, "t2");
    assert_eq!((r.scanned_files, r.trusted_files), (0, 6), "{r:?}");
    assert_eq!(r.reflinked_files, 5, "{r:?}");
}

#[test]
fn tmpfs_gets_no_cache() {
    let shm = Path::new("/dev/shm");
    let tmpfs = rustix::fs::statfs(shm).is_ok_and(|s| s.f_type as u64 == 0x0102_1994);
    if !tmpfs {
        eprintln!("skipped: /dev/shm is not a tmpfs here");
        return;
    }
    let f = project_in(shm, 5);
    copy(&f, "t1");
    let r = copy(&f, "t2");
    assert_eq!((r.scanned_files, r.trusted_files), (6, 0), "{r:?}");
    git(&f.project, &["status", "--short"]);
}
