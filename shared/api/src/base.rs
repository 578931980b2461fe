//! The `base` routes (being moved here from services/gateway/openapi.json).

use crate::op::Op;

pub fn ops() -> Vec<Op> {
    Vec::new()
}
