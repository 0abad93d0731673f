//! The usage page (u2 owns this module): tokens by agent, model and day, as an inline SVG
//! chart generated server-side.
//!
//! Until u2's page lands it says so, with a clear code.

use crate::pages::layout::{self, Nav};
use crate::web::{PageError, Viewer};
use axum::Extension;
use axum::http::StatusCode;

/// `GET /usage`.
pub async fn page(Extension(_viewer): Extension<Viewer>) -> Result<maud::Markup, PageError> {
    let _ = layout::page;
    let _ = Nav::Usage;
    Err(PageError::new(
        StatusCode::NOT_IMPLEMENTED,
        "NOT_IMPLEMENTED",
        "The usage page is not built yet.",
    ))
}
