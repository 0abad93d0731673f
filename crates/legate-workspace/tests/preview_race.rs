//! The copy's patch against an agent process that outlives its turn and swaps a directory of
//! the copy for a symlink to an outside directory while the patch is made: `git add` lstat()s
//! and then opens by path, so without a check git could stage the outside files. No preview
//! may ever carry them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Fixture;
use legate_core::ErrorCode;
use legate_review::preview;
use legate_workspace::{CopyLimits, SecretPatterns};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

const CANARY: &str = "canary-3b7e outside the copy";
const PREVIEWS: usize = 150;

#[test]
fn a_directory_swapped_for_a_symlink_never_reaches_the_patch() {
    let f = Fixture::new(&[("a.txt", b"alpha\n")]);
    f.commit_all();
    let (_report, baseline) = f.copy(&[]);
    let copy = baseline.copy().to_path_buf();
    let outside = f.home.parent().unwrap().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    for i in 0..50 {
        std::fs::write(
            outside.join(format!("f{i:02}.txt")),
            format!("{CANARY} {i}\n"),
        )
        .unwrap();
    }
    std::fs::create_dir(copy.join("d")).unwrap();
    for i in 0..50 {
        std::fs::write(copy.join(format!("d/f{i:02}.txt")), format!("inside {i}\n")).unwrap();
    }

    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (copy, outside, stop) = (copy.clone(), outside.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut flips = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let _ = std::fs::rename(copy.join("d"), copy.join(".d.real"));
                let _ = std::os::unix::fs::symlink(&outside, copy.join(".d.link"));
                let _ = std::fs::rename(copy.join(".d.link"), copy.join("d"));
                std::thread::sleep(std::time::Duration::from_micros(50));
                let _ = std::fs::remove_file(copy.join("d"));
                let _ = std::fs::rename(copy.join(".d.real"), copy.join("d"));
                std::thread::sleep(std::time::Duration::from_micros(50));
                flips += 1;
            }
            flips
        })
    };
    let (mut ok, mut refused, mut leaked) = (0, 0, 0);
    for _ in 0..PREVIEWS {
        match preview(
            &baseline,
            &SecretPatterns::default(),
            &CopyLimits::default(),
        ) {
            Ok(p) => {
                if String::from_utf8_lossy(&p.patch).contains(CANARY) {
                    leaked += 1;
                } else {
                    ok += 1;
                }
            }
            Err(e) => {
                // A link on the way (UNSAFE_PATH), or git tripping over a name that vanished.
                assert!(
                    matches!(e.code, ErrorCode::UnsafePath | ErrorCode::Internal),
                    "{e:?}"
                );
                refused += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    eprintln!("{flips} flips, {PREVIEWS} previews: {ok} clean, {refused} refused, {leaked} leaked");
    assert!(refused > 0, "the race never hit a symlink");
    assert_eq!(
        leaked, 0,
        "{leaked} of {PREVIEWS} patches carried outside files"
    );
}
