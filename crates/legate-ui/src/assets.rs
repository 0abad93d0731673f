//! The dashboard's static files, embedded in the binary (no build step, no Node): a style
//! sheet and one small script. Each is served under its content-hashed name
//! (`/assets/app-<hash>.css`, `Cache-Control: public, max-age=31536000, immutable`) and under
//! its plain name (`/assets/app.css`, `no-cache`), both with an `ETag` that a matching
//! `If-None-Match` answers `304`.
//!
//! It serves only the files listed here; a request for any other name is 404.

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

/// One embedded file.
#[derive(Debug)]
pub struct Asset {
    /// The plain name (`app.css`).
    pub name: &'static str,
    /// The file.
    pub body: &'static str,
    /// Its content type.
    pub content_type: &'static str,
}

/// The style sheet.
pub const CSS: &Asset = &Asset {
    name: "app.css",
    body: include_str!("../assets/app.css"),
    content_type: "text/css; charset=utf-8",
};
/// The script: live updates and countdowns.
pub const JS: &Asset = &Asset {
    name: "app.js",
    body: include_str!("../assets/app.js"),
    content_type: "text/javascript; charset=utf-8",
};

const ALL: [&Asset; 2] = [CSS, JS];

/// The first 16 hex digits of the sha256 of each asset, computed once.
fn hashes() -> &'static [String; 2] {
    static HASHES: OnceLock<[String; 2]> = OnceLock::new();
    HASHES.get_or_init(|| {
        ALL.map(|a| {
            Sha256::digest(a.body.as_bytes())
                .iter()
                .take(8)
                .map(|b| format!("{b:02x}"))
                .collect()
        })
    })
}

fn hash_of(asset: &Asset) -> &'static str {
    let i = ALL.iter().position(|a| a.name == asset.name).unwrap_or(0);
    &hashes()[i]
}

/// The hashed name of `asset` (`app-<hash>.css`).
pub fn hashed_name(asset: &Asset) -> String {
    let (stem, ext) = asset.name.rsplit_once('.').unwrap_or((asset.name, ""));
    format!("{stem}-{}.{ext}", hash_of(asset))
}

/// The URL pages link: the hashed name.
pub fn url(asset: &Asset) -> String {
    format!("/assets/{}", hashed_name(asset))
}

/// `GET /assets/{name}`.
pub async fn serve(Path(name): Path<String>, headers: HeaderMap) -> Response {
    let found = ALL.iter().find_map(|a| {
        if hashed_name(a) == name {
            Some((*a, true))
        } else if a.name == name {
            Some((*a, false))
        } else {
            None
        }
    });
    let Some((asset, immutable)) = found else {
        return (StatusCode::NOT_FOUND, "no such asset").into_response();
    };
    let etag = format!("\"{}\"", hash_of(asset));
    let cache = if immutable {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut response = if matches {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, asset.content_type)], asset.body).into_response()
    };
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    response
}
