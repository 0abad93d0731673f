//! The dashboard test server is the front kit's (`legate_frontkit::ui`); `sse` reads an
//! event stream.

#![allow(dead_code, unused_imports)]

pub use legate_frontkit::ui::{Session, UiFront as UiServer, field};

pub mod sse;
