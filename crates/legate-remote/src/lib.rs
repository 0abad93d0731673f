//! The remote backend: an agent served over A2A v1.0 by another server (another `legate
//! serve` among them) becomes an agent of kind `a2a`, driven like any local one.
//!
//! Layout: [`copy`] (Legate's copy-workspace extension, the client side: the copy's files go
//! out with the task, the remote's patch comes back and is applied to the local copy).
//!
//! This crate never touches the store and never decides a task's state: like every backend,
//! it reports events and outcomes, and records the remote task a turn runs as through the
//! engine's [`legate_backend::RemoteLedger`] before it relays anything else.

pub mod copy;
