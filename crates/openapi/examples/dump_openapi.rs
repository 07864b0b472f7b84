//! Builds the documents, prints how long that took and how big each is, and writes them to the
//! directory given as the first argument (if any): `openapi_v2.json`, `openapi_v2.pb`,
//! `openapi_v3.json` and `openapi_v3_<path with _ for />.json`.
//!
//! `cargo run --release -p skiff-openapi --example dump_openapi -- /tmp/openapi`

use std::time::Instant;

use skiff_openapi::Documents;

fn main() -> std::io::Result<()> {
    let started = Instant::now();
    let docs = Documents::build();
    let elapsed = started.elapsed();
    println!("build: {:.1} ms", elapsed.as_secs_f64() * 1000.0);
    println!("v2 json: {} bytes", docs.v2_json().len());
    println!("v2 protobuf: {} bytes", docs.v2_protobuf().len());
    println!("v3 index: {} bytes", docs.v3_index_json().len());
    for path in docs.v3_paths() {
        let bytes = docs.v3_group_version(path).map_or(0, |b| b.len());
        println!("v3 {path}: {bytes} bytes");
    }
    let Some(dir) = std::env::args().nth(1) else {
        return Ok(());
    };
    let dir = std::path::Path::new(&dir);
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("openapi_v2.json"), docs.v2_json())?;
    std::fs::write(dir.join("openapi_v2.pb"), docs.v2_protobuf())?;
    std::fs::write(dir.join("openapi_v3.json"), docs.v3_index_json())?;
    for path in docs.v3_paths() {
        let name = format!("openapi_v3_{}.json", path.replace('/', "_"));
        std::fs::write(
            dir.join(name),
            docs.v3_group_version(path).unwrap_or_default(),
        )?;
    }
    Ok(())
}
