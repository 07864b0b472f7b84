//! The settings every node of a cluster shares, which k3s's agents fetch from their server
//! (`/v1-k3s/config`): `skiff server` publishes them as the ConfigMap
//! `kube-system/skiff-node-config` (readable by `system:nodes` through the Role and RoleBinding
//! of the same name), and `skiff agent` reads them at start, so that its kubelet uses the
//! cluster's pod network backend and it runs only the node controllers the server runs. The
//! server is the only writer; agents only read (no component calls another).

use std::collections::BTreeMap;

use anyhow::{Context as _, bail};
use clap::ValueEnum as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use super::kubelet::BackendArg;

/// The ConfigMap's (and its Role's) namespace and name.
pub const NAMESPACE: &str = "kube-system";
pub const NAME: &str = "skiff-node-config";

const FLANNEL_BACKEND: &str = "flannel-backend";
const DISABLE: &str = "disable";

/// What nodes take from the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeConfig {
    /// `--flannel-backend`.
    pub flannel_backend: BackendArg,
    /// Whether nodes enforce NetworkPolicies (`--disable network-policy` turns it off).
    pub network_policy: bool,
    /// Whether nodes run the ingress controller (`--disable ingress`).
    pub ingress: bool,
}

impl Default for NodeConfig {
    /// What a server publishing no settings runs: k3s's defaults.
    fn default() -> Self {
        NodeConfig {
            flannel_backend: BackendArg::Vxlan,
            network_policy: true,
            ingress: true,
        }
    }
}

impl NodeConfig {
    /// The node controllers turned off, by their `--disable` names.
    pub fn disabled(self) -> Vec<&'static str> {
        [
            (!self.network_policy).then_some("network-policy"),
            (!self.ingress).then_some("ingress"),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// The ConfigMap's data.
    pub fn to_data(self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (FLANNEL_BACKEND.into(), self.flannel_backend.flag_value()),
            (DISABLE.into(), self.disabled().join(",")),
        ])
    }

    /// The settings in a ConfigMap's data; a value this version does not know is an error (a
    /// newer server's setting is not silently dropped).
    pub fn from_data(data: &BTreeMap<String, String>) -> anyhow::Result<NodeConfig> {
        let backend = data
            .get(FLANNEL_BACKEND)
            .with_context(|| format!("no {FLANNEL_BACKEND}"))?;
        let flannel_backend = BackendArg::from_str(backend, false)
            .map_err(|e| anyhow::anyhow!("{FLANNEL_BACKEND} {backend:?}: {e}"))?;
        let mut config = NodeConfig {
            flannel_backend,
            network_policy: true,
            ingress: true,
        };
        for name in data.get(DISABLE).into_iter().flat_map(|d| d.split(',')) {
            match name.trim() {
                "" => {}
                "network-policy" => config.network_policy = false,
                "ingress" => config.ingress = false,
                other => bail!("{DISABLE}: unknown component {other:?}"),
            }
        }
        Ok(config)
    }
}

/// The server's node settings, or `None` when it publishes none: a server of an older version,
/// or an API server not started by `skiff server` (then the Role is missing too, and reading is
/// forbidden rather than not found).
pub async fn read(client: kube::Client) -> anyhow::Result<Option<NodeConfig>> {
    let configmaps: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);
    let cm = match configmaps.get(NAME).await {
        Ok(cm) => cm,
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 403 => {
            return Ok(None);
        }
        Err(e) => {
            return Err(e).with_context(|| format!("reading the ConfigMap {NAMESPACE}/{NAME}"));
        }
    };
    let config = NodeConfig::from_data(&cm.data.unwrap_or_default())
        .with_context(|| format!("the ConfigMap {NAMESPACE}/{NAME}"))?;
    Ok(Some(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_round_trip_through_the_configmaps_data() {
        let config = NodeConfig {
            flannel_backend: BackendArg::HostGw,
            network_policy: false,
            ingress: true,
        };
        let data = config.to_data();
        assert_eq!(data["flannel-backend"], "host-gw");
        assert_eq!(data["disable"], "network-policy");
        assert_eq!(NodeConfig::from_data(&data).unwrap(), config);
        let all = NodeConfig {
            flannel_backend: BackendArg::Vxlan,
            network_policy: true,
            ingress: true,
        };
        assert_eq!(all.to_data()["disable"], "");
        assert_eq!(NodeConfig::from_data(&all.to_data()).unwrap(), all);
    }

    #[test]
    fn unknown_values_are_errors() {
        let data = |backend: &str, disable: &str| {
            BTreeMap::from([
                ("flannel-backend".to_string(), backend.to_string()),
                ("disable".to_string(), disable.to_string()),
            ])
        };
        assert!(NodeConfig::from_data(&data("wireguard", "")).is_err());
        assert!(NodeConfig::from_data(&data("vxlan", "traefik")).is_err());
        assert!(NodeConfig::from_data(&BTreeMap::new()).is_err());
    }
}
