//! `read_inside` (what verify, staleness and integration use to read files an agent wrote)
//! against a directory on the way being swapped for a symlink to an outside directory that
//! holds a file of the same name, from another thread, while it reads.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::ErrorCode;
use legate_workspace::read_inside;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

const CANARY: &[u8] = b"canary 5d1c outside the copy\n";
const READS: usize = 3_000;
/// Reads go on until the flipper has swapped `d` at least this often.
const FLIPS: usize = 300;

#[test]
fn a_directory_swapped_for_a_symlink_is_never_read_through() {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let (root, outside) = (base.join("copy"), base.join("outside"));
    std::fs::create_dir_all(root.join("d")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("f.txt"), CANARY).unwrap();
    std::fs::write(root.join("d/f.txt"), b"inside\n").unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let flips = Arc::new(AtomicUsize::new(0));
    let flipper = {
        let (root, outside, stop) = (root.clone(), outside.clone(), stop.clone());
        let flips = flips.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // d is a directory: move it aside and put a link in its place, then back.
                let _ = std::fs::rename(root.join("d"), root.join("d.real"));
                let _ = std::os::unix::fs::symlink(&outside, root.join("d.link"));
                let _ = std::fs::rename(root.join("d.link"), root.join("d"));
                std::thread::yield_now();
                let _ = std::fs::remove_file(root.join("d"));
                let _ = std::fs::rename(root.join("d.real"), root.join("d"));
                std::thread::yield_now();
                flips.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let (mut inside, mut refused, mut leaked) = (0, 0, 0);
    let mut reads = 0;
    while reads < READS || flips.load(Ordering::Relaxed) < FLIPS {
        reads += 1;
        match read_inside(&root, "d/f.txt", u64::MAX) {
            Ok(Some(bytes)) if bytes == CANARY => leaked += 1,
            Ok(_) => inside += 1,
            Err(e) => {
                assert!(
                    matches!(e.code, ErrorCode::UnsafePath | ErrorCode::Internal),
                    "{e:?}"
                );
                refused += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    flipper.join().unwrap();
    let flips = flips.load(Ordering::Relaxed);
    eprintln!("{flips} flips, {reads} reads: {inside} inside, {refused} refused, {leaked} leaked");
    assert!(refused > 0, "the race never hit a symlink");
    assert_eq!(
        leaked, 0,
        "read through a symlink {leaked} times of {reads}"
    );
}
