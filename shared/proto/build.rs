//! Generates the gRPC code from `proto/weft/v1`. protoc comes from `protoc-bin-vendored`, so a
//! fresh machine needs nothing but cargo.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    unsafe_env_set(&protoc);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let files = [
        root.join("weft/v1/router.proto"),
        root.join("weft/v1/substrate.proto"),
        root.join("weft/v1/memory.proto"),
        root.join("weft/v1/channels.proto"),
        root.join("weft/v1/mcp.proto"),
        root.join("weft/v1/volumes.proto"),
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    tonic_prost_build::configure().compile_protos(&files, &[root])?;
    Ok(())
}

fn unsafe_env_set(protoc: &std::path::Path) {
    // `tonic-prost-build` reads PROTOC from the environment; hand it the vendored binary.
    #[expect(
        unsafe_code,
        reason = "build scripts are single-threaded; set_var is sound here"
    )]
    unsafe {
        std::env::set_var("PROTOC", protoc);
    }
}
