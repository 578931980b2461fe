//! The `llm` routes (being moved here from services/gateway/openapi.llm.json).

use crate::op::Op;

pub fn ops() -> Vec<Op> {
    Vec::new()
}
