//! The dashboard's pages.
pub mod diff;
pub mod usage;
