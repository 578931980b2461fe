//! The `skills` routes (being moved here from services/gateway/openapi.skills.json).

use crate::op::Op;

pub fn ops() -> Vec<Op> {
    Vec::new()
}
