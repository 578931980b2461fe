//! The `channels` routes (being moved here from services/gateway/openapi.channels.json).

use crate::op::Op;

pub fn ops() -> Vec<Op> {
    Vec::new()
}
