//! The `ingress` routes (being moved here from services/gateway/openapi.ingress.json).

use crate::op::Op;

pub fn ops() -> Vec<Op> {
    Vec::new()
}
