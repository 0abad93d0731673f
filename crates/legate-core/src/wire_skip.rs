//! Predicates for `#[serde(skip_serializing_if = …)]` that the wire shapes share, so a
//! count left out when it is zero is left out the same way everywhere.
//!
//! It owns those predicates only; it never decides what a shape carries.

/// Whether `n` is its type's zero (`0` for the integers): a count worth leaving out.
///
/// ```
/// #[derive(serde::Serialize)]
/// struct Shape {
///     #[serde(skip_serializing_if = "legate_core::wire_skip::is_zero")]
///     dropped: u64,
/// }
/// assert_eq!(serde_json::to_string(&Shape { dropped: 0 }).unwrap(), "{}");
/// assert_eq!(serde_json::to_string(&Shape { dropped: 2 }).unwrap(), r#"{"dropped":2}"#);
/// ```
pub fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}
