//! The `memory` routes (being moved here from services/gateway/openapi.memory.json).

use crate::op::Op;

pub fn ops() -> Vec<Op> {
    Vec::new()
}
