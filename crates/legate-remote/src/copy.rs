//! Legate's copy-workspace extension, the client side (issue 15, part 5: "remote work, local
//! review"). Not written yet: a copy task sent to a remote agent is refused with
//! `REMOTE_WORKSPACE_UNSUPPORTED` until this module carries the copy's files out and applies
//! the returned patch.
