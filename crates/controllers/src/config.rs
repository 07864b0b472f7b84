//! The controllers' settings that `skiff controller-manager` flags set (upstream's
//! kube-controller-manager flag names), carried by [`crate::Context`].

/// Settings for the controllers; defaults are upstream's.
#[derive(Debug, Clone)]
pub struct Config {
    /// `--max-endpoints-per-slice`: endpoints per EndpointSlice (upstream default 100).
    pub max_endpoints_per_slice: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_endpoints_per_slice: 100,
        }
    }
}
