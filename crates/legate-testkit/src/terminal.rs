//! A real pseudo-terminal for tests of what only a person at a terminal may do: the CLI
//! decides "a person is here" from its stdin and stderr being terminals.
//!
//! This module opens the pair and hands out the two ends; it never reads what is written to
//! the terminal and never runs anything.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;

/// A pseudo-terminal: `controller` is the side a terminal emulator would hold; `device` is
/// the terminal a program is given. Keep the controller open until the program has ended.
#[derive(Debug)]
pub struct Terminal {
    /// The controlling side.
    pub controller: OwnedFd,
    /// The terminal device itself.
    pub device: File,
}

/// Opens a new pseudo-terminal pair.
pub fn open() -> std::io::Result<Terminal> {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    let controller = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    grantpt(&controller)?;
    unlockpt(&controller)?;
    let name = ptsname(&controller, Vec::new())?;
    let device = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        // Opening the device must not make it this test process's controlling terminal.
        .custom_flags(rustix::fs::OFlags::NOCTTY.bits() as i32)
        .open(std::ffi::OsStr::from_bytes(name.as_bytes()))?;
    Ok(Terminal { controller, device })
}
