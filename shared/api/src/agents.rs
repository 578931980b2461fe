//! The `agents` routes (being moved here from services/gateway/openapi.agents.json).

use crate::op::Op;

pub fn ops() -> Vec<Op> {
    Vec::new()
}
