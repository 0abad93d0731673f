//! Tool arguments in and answers out: a tool's JSON arguments read into its argument type
//! (`INVALID_INPUT` quoting the parser when they do not fit), its answer written as JSON.
//!
//! This module never decides what a tool does; both servers (`server`, `supervisor`) use it.

use legate_core::{Error, ErrorCode, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// `args` read as `T`; `INVALID_INPUT: invalid arguments: …` with the parser's words.
pub(crate) fn parse<T: DeserializeOwned>(args: Value) -> Result<T> {
    serde_json::from_value(args)
        .map_err(|e| Error::quoting(ErrorCode::InvalidInput, "invalid arguments", e))
}

/// `out` as JSON.
pub(crate) fn to_value<T: Serialize>(out: T) -> Result<Value> {
    serde_json::to_value(out)
        .map_err(|e| Error::quoting(ErrorCode::Internal, "could not encode an answer", e))
}
