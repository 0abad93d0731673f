//! The relay's fast path on Linux: both directions moved with `splice(2)` through a pipe, so
//! the bytes never enter this process's memory (two copies fewer per byte than a userspace
//! copy loop).
//!
//! It counts what it moves and ends as `copy_bidirectional` does: each direction ends at the
//! source's end of stream (the destination's write side is then shut), and the first error
//! ends both. This module never reads the bytes it moves.

use rustix::net::Shutdown;
use rustix::pipe::{PipeFlags, SpliceFlags, pipe_with, splice};
use std::io;
use std::os::fd::OwnedFd;
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Most bytes moved per `splice` call (the default pipe capacity; a larger pipe measured no
/// faster and costs kernel memory per connection).
const CHUNK: usize = 64 * 1024;

/// Relays between `a` and `b` until both directions end; returns the bytes moved a→b and
/// b→a so far (on error too). `Err` only when no pipe could be made: nothing was moved, and
/// the caller relays another way.
pub(crate) async fn relay(
    a: &TcpStream,
    b: &TcpStream,
) -> Result<((u64, u64), Option<io::Error>), io::Error> {
    let ab = Pipe::new()?;
    let ba = Pipe::new()?;
    let mut a_to_b = 0u64;
    let mut b_to_a = 0u64;
    let result = tokio::try_join!(
        one_way(a, b, &ab, &mut a_to_b),
        one_way(b, a, &ba, &mut b_to_a)
    );
    Ok(((a_to_b, b_to_a), result.err()))
}

/// A non-blocking pipe.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    fn new() -> io::Result<Self> {
        let (read, write) = pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC)?;
        Ok(Self { read, write })
    }
}

/// Moves `from` to `to` through `pipe` until `from` ends, then shuts `to`'s write side.
async fn one_way(from: &TcpStream, to: &TcpStream, pipe: &Pipe, moved: &mut u64) -> io::Result<()> {
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    loop {
        // The pipe is empty here, so a would-block can only be the socket's.
        let filled = from
            .async_io(Interest::READABLE, || {
                splice(from, None, &pipe.write, None, CHUNK, flags).map_err(io::Error::from)
            })
            .await?;
        if filled == 0 {
            return match rustix::net::shutdown(to, Shutdown::Write) {
                Ok(()) | Err(rustix::io::Errno::NOTCONN) => Ok(()),
                Err(error) => Err(error.into()),
            };
        }
        let mut left = filled;
        while left > 0 {
            // The pipe holds `left` bytes here, so a would-block can only be the socket's.
            let n = to
                .async_io(Interest::WRITABLE, || {
                    splice(&pipe.read, None, to, None, left, flags).map_err(io::Error::from)
                })
                .await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            left -= n;
            *moved += n as u64;
        }
    }
}
