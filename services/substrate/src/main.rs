//! `weft-substrate`: the definitions service as its own process.

fn main() {}
