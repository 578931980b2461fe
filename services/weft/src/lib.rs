//! The `weft` operator CLI as a library: the in-process fleet that `weft up` runs (and tests
//! start on port 0), bootstrap of the first admin token, and `weft doctor`'s checks.

pub mod doctor;
pub mod fleet;

pub use fleet::{Fleet, FleetError};
