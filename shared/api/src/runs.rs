//! The `runs` routes (being moved here from services/gateway/openapi.runs.json).

use crate::op::Op;

pub fn ops() -> Vec<Op> {
    Vec::new()
}
