//! Compiles the trimmed etcd v3 protos in `proto/` into the gRPC facade's server (and client,
//! used by its tests) code.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Every `bytes` field as `bytes::Bytes`, the store's own key/value type: no copies.
        .bytes(".")
        .compile_protos(
            &["proto/mvccpb/kv.proto", "proto/etcdserverpb/rpc.proto"],
            &["proto"],
        )?;
    Ok(())
}
