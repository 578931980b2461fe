//! The `ui` routes (being moved here from services/gateway/openapi.ui.json).

use crate::op::Op;

pub fn ops() -> Vec<Op> {
    Vec::new()
}
