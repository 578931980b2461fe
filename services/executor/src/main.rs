//! `weft-executor`: the run executor as its own process.

fn main() {}
