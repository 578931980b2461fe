//! Generates the gRPC code from `proto/weft/v1` and the public API from `proto/weft/public/v1`. protoc comes from `protoc-bin-vendored`, so a
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
    tonic_prost_build::configure().compile_protos(&files, std::slice::from_ref(&root))?;

    // The public API, apart: its own descriptor set feeds server reflection, which so lists the
    // public services alone. `google/protobuf/*.proto` come with the vendored protoc.
    let public = root.join("weft/public/v1/runs.proto");
    println!("cargo:rerun-if-changed={}", public.display());
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .build_client(true)
        .file_descriptor_set_path(out.join("weft_public_v1_descriptor.bin"))
        .compile_protos(&[public], &[root, protoc_bin_vendored::include_path()?])?;
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
