//! Rebuilds the gateway when the web UI's build (`web/dist`, embedded by `ui.rs`) changes, and
//! when it first appears.

fn main() {
    let dist = std::path::Path::new("../../web/dist");
    if dist.exists() {
        println!("cargo:rerun-if-changed=../../web/dist");
    } else {
        // Watching a path that does not exist would rebuild every time; watch its parent's
        // own entries instead, so creating web/dist is noticed.
        println!("cargo:rerun-if-changed=../../web/package.json");
        println!("cargo:rerun-if-changed=../../web");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
