//! The remote backend: an agent served over A2A v1.0 by another server (another `legate
//! serve` among them) becomes an agent of kind `a2a`, driven like any local one.
//!
//! Layout, one concern per module: [`token`] (the bearer token from `token_env` or
//! `token_file`), [`card`] (the card, the interface, supervision, the token check),
//! [`connect`] (the official `a2a-client-lf` client on the chosen interface), [`translate`]
//! (A2A updates as Legate's events, bounded), [`follow`] (a stream or `GetTask` polling to
//! the end of a turn, cancel as `CancelTask`), [`session`] ([`A2aBackend`], [`A2aSession`],
//! re-attach after a restart), [`errors`] (the `REMOTE_*` codes), [`copy`] (Legate's
//! copy-workspace extension, the client side), [`wire`] and [`events`] (the transport
//! under the official client: every answer, error body and event stream read bounded), and
//! [`tap`] (those requests and answers, for a tapped task's wire tap).
//!
//! This crate never touches the store and never decides a task's state: like every backend,
//! it reports events and outcomes, and records the remote task a turn runs as through the
//! engine's [`legate_backend::RemoteLedger`] before it relays anything else. The remote is
//! hostile: everything read from it is bounded, and its words are quoted escaped.

pub mod card;
pub mod connect;
pub mod copy;
pub mod errors;
pub mod events;
pub mod follow;
pub mod json_shape;
pub mod session;
pub mod tap;
pub mod tls;
pub mod token;
pub mod translate;
pub mod wire;

pub use session::{A2aBackend, A2aSession, KIND, kind};

#[cfg(test)]
mod tests {
    #[test]
    fn the_kind_is_a_valid_name() {
        assert_eq!(
            legate_core::AgentKind::new(super::KIND).unwrap().as_str(),
            "a2a"
        );
        assert_eq!(super::kind().as_str(), "a2a");
    }
}
