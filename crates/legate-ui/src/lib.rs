//! Legate's web dashboard (placeholder until the server lands).
pub mod pages;
