//! A file system that can clone files (xfs with `reflink=1`, or btrfs) made on a loop device
//! for one test, and taken down when the test ends, pass or panic.
//!
//! Needs root, `mkfs.xfs` (Debian's `xfsprogs`) or `mkfs.btrfs` (`btrfs-progs`) and loop
//! devices. Without them a test skips, unless `LEGATE_REQUIRE_REFLINK=1` (CI) makes that a
//! failure.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Which file system an image holds.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Xfs,
    Btrfs,
}

/// A mounted xfs or btrfs image with reflinks; unmounted (its loop device then detached) and removed
/// on drop.
pub struct ReflinkFs {
    tmp: tempfile::TempDir,
    mount: PathBuf,
}

fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(format!(
            "{cmd} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl ReflinkFs {
    /// Makes and mounts one of `mib` MiB (sparse; at least 300, xfs's least). `None` (the
    /// test skips, saying why) when this machine cannot, unless `LEGATE_REQUIRE_REFLINK=1`.
    pub fn mount(mib: u64) -> Option<Self> {
        Self::mount_kind(Kind::Xfs, mib.max(300))
    }

    /// A btrfs image of `mib` MiB (at least 256), as [`ReflinkFs::mount`] makes an xfs one.
    pub fn mount_btrfs(mib: u64) -> Option<Self> {
        Self::mount_kind(Kind::Btrfs, mib.max(256))
    }

    fn mount_kind(kind: Kind, mib: u64) -> Option<Self> {
        match Self::try_mount(kind, mib) {
            Ok(fs) => Some(fs),
            Err(why) if std::env::var("LEGATE_REQUIRE_REFLINK").as_deref() == Ok("1") => {
                panic!("LEGATE_REQUIRE_REFLINK=1 but no reflink file system could be made: {why}")
            }
            Err(why) => {
                eprintln!("skipped: no reflink file system here ({why})");
                None
            }
        }
    }

    fn try_mount(kind: Kind, mib: u64) -> Result<Self, String> {
        if rustix::process::geteuid().as_raw() != 0 {
            return Err("not root".into());
        }
        let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
        let image = tmp.path().join("fs.img");
        let mount = tmp.path().join("mnt");
        std::fs::create_dir(&mount).map_err(|e| e.to_string())?;
        let file = std::fs::File::create(&image).map_err(|e| e.to_string())?;
        file.set_len(mib * 1024 * 1024).map_err(|e| e.to_string())?;
        drop(file);
        let image_s = image.to_str().unwrap();
        match kind {
            Kind::Xfs => run("mkfs.xfs", &["-q", "-m", "reflink=1", image_s])?,
            Kind::Btrfs => run("mkfs.btrfs", &["-q", image_s])?,
        };
        // `-o loop` makes the loop device go away by itself once unmounted (autoclear).
        run("mount", &["-o", "loop", image_s, mount.to_str().unwrap()])?;
        Ok(Self { tmp, mount })
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// Bytes free on it, as `statvfs` tells.
    pub fn free_bytes(&self) -> u64 {
        let _ = Command::new("sync").arg("-f").arg(&self.mount).status();
        let s = rustix::fs::statvfs(&self.mount).unwrap();
        s.f_bfree * s.f_frsize
    }
}

/// How many of `file`'s bytes lie in extents `filefrag -v` marks `shared`, and in all.
pub fn shared_extent_bytes(file: &Path) -> (u64, u64) {
    let out = run("filefrag", &["-v", "-b1", file.to_str().unwrap()]).unwrap();
    let (mut shared, mut all) = (0, 0);
    for line in out.lines() {
        // "   0:        0..   65535:   ...:  65536:   last,shared,eof"
        let cols: Vec<&str> = line.split(':').map(str::trim).collect();
        if cols.len() < 5 || cols[0].parse::<u64>().is_err() {
            continue;
        }
        let len: u64 = cols[3].parse().unwrap_or(0);
        all += len;
        if cols.last().is_some_and(|flags| flags.contains("shared")) {
            shared += len;
        }
    }
    (shared, all)
}

impl Drop for ReflinkFs {
    fn drop(&mut self) {
        let mnt = self.mount.to_str().unwrap_or_default().to_string();
        // Busy for a moment while the last git a copy ran exits; lazily detached after
        // that (the loop device then goes once the file system is released).
        for _ in 0..50 {
            if run("umount", &[&mnt]).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = run("umount", &["-l", &mnt]);
    }
}
