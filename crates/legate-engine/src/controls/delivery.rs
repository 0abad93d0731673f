//! How a task's progress is delivered (issue 17): owned by the delivery engineer.

use crate::core::request::SubmitRequest;
use legate_core::DeliveryMode;

/// The mode `request` asks for; events by default.
pub(super) fn check(request: &SubmitRequest) -> DeliveryMode {
    request.delivery_mode.unwrap_or_default()
}
