//! The `mcp` routes (being moved here from services/gateway/openapi.mcp.json).

use crate::op::Op;

pub fn ops() -> Vec<Op> {
    Vec::new()
}
