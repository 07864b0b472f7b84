//! `version`: the Kubernetes version Skiff implements, and the platform in Go's names, as the
//! API server's `/version` and every component's `User-Agent` report them.

/// The Kubernetes version Skiff reports (the API it implements).
pub const GIT_VERSION: &str = "v1.33.0-skiff";
pub const MAJOR: &str = "1";
pub const MINOR: &str = "33";

/// This machine's `GOOS/GOARCH` (`linux/amd64`).
pub fn platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    format!("{}/{arch}", std::env::consts::OS)
}

/// A component's `User-Agent` as client-go builds it (`<program>/<version> (<platform>)
/// kubernetes/<commit>`), with Skiff in the commit's place: `skiff-scheduler/v1.33.0-skiff
/// (linux/amd64) skiff/0.1.0`.
pub fn user_agent(program: &str) -> String {
    format!(
        "{program}/{GIT_VERSION} ({}) skiff/{}",
        platform(),
        env!("CARGO_PKG_VERSION")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_agent_names_program_version_and_platform() {
        let ua = user_agent("kubelet");
        assert!(ua.starts_with("kubelet/v1.33.0-skiff ("), "{ua}");
        assert!(ua.contains(&format!("({})", platform())), "{ua}");
        assert!(!platform().contains("x86_64"));
    }
}
