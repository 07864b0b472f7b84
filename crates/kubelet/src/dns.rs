//! The sandbox's DNS config from the pod's `dnsPolicy` and `dnsConfig`, as upstream's
//! `pkg/kubelet/network/dns`: `ClusterFirst` (and `ClusterFirstWithHostNet` for hostNetwork pods)
//! uses the kubelet's `--cluster-dns` servers, the search path
//! `NS.svc.DOMAIN svc.DOMAIN DOMAIN` followed by the host's, and `ndots:5`; `Default` is the
//! host's resolv.conf; `None` only what `dnsConfig` says. `dnsConfig` is then appended
//! (nameservers and searches without duplicates, options replacing ones of the same name).
//! Without cluster DNS servers, `ClusterFirst` falls back to `Default` with upstream's warning.

use std::net::IpAddr;

use k8s_cri::v1::DnsConfig;
use k8s_openapi::api::core::v1::Pod;

/// The kubelet's DNS settings, the host's resolv.conf and where its hosts file is.
#[derive(Debug, Clone)]
pub struct DnsSettings {
    /// `--cluster-dns`.
    pub cluster_dns: Vec<IpAddr>,
    /// `--cluster-domain`.
    pub cluster_domain: String,
    /// The host's resolv.conf (upstream's `--resolv-conf`, default /etc/resolv.conf).
    pub host: DnsConfig,
    /// The node's hosts file, which hostNetwork pods see (with their `hostAliases`).
    pub hosts_file: std::path::PathBuf,
}

impl Default for DnsSettings {
    fn default() -> Self {
        DnsSettings {
            cluster_dns: Vec::new(),
            // upstream's conventional clusterDomain
            cluster_domain: "cluster.local".into(),
            host: DnsConfig::default(),
            hosts_file: "/etc/hosts".into(),
        }
    }
}

/// The `MissingClusterDNS` warning's message for a pod with this policy.
pub fn missing_cluster_dns(policy: &str) -> String {
    format!(
        "kubelet does not have ClusterDNS IP configured and cannot create Pod using \"{policy}\" policy. Falling back to \"Default\" policy."
    )
}

/// A resolv.conf's nameservers, search path (the last `search` line) and options.
pub fn parse_resolv_conf(text: &str) -> DnsConfig {
    let mut out = DnsConfig::default();
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or_default();
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("nameserver") => out.servers.extend(fields.next().map(String::from)),
            Some("search") => {
                out.searches = fields
                    .map(|s| s.trim_end_matches('.').to_string())
                    .collect()
            }
            Some("options") => out.options.extend(fields.map(String::from)),
            _ => {}
        }
    }
    out
}

fn push_unique(list: &mut Vec<String>, items: impl IntoIterator<Item = String>) {
    for item in items {
        if !list.contains(&item) {
            list.push(item);
        }
    }
}

/// The pod's sandbox DNS config, and the warning to record when ClusterFirst had to fall back.
pub fn pod_dns(pod: &Pod, settings: &DnsSettings) -> (DnsConfig, Option<String>) {
    let spec = pod.spec.clone().unwrap_or_default();
    let host_network = spec.host_network == Some(true);
    let policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    let mut cluster = match policy {
        "ClusterFirstWithHostNet" => true,
        "ClusterFirst" => !host_network,
        _ => false,
    };
    let mut warning = None;
    if cluster && settings.cluster_dns.is_empty() {
        warning = Some(missing_cluster_dns(policy));
        cluster = false;
    }
    let mut out = if policy == "None" {
        DnsConfig::default()
    } else if cluster {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let domain = &settings.cluster_domain;
        let mut searches = vec![
            format!("{ns}.svc.{domain}"),
            format!("svc.{domain}"),
            domain.clone(),
        ];
        push_unique(&mut searches, settings.host.searches.clone());
        DnsConfig {
            servers: settings
                .cluster_dns
                .iter()
                .map(|ip| ip.to_string())
                .collect(),
            searches,
            options: vec!["ndots:5".into()],
        }
    } else {
        settings.host.clone()
    };
    if let Some(extra) = &spec.dns_config {
        push_unique(
            &mut out.servers,
            extra.nameservers.clone().unwrap_or_default(),
        );
        push_unique(
            &mut out.searches,
            extra.searches.clone().unwrap_or_default(),
        );
        for option in extra.options.iter().flatten() {
            let name = option.name.clone().unwrap_or_default();
            let formatted = match &option.value {
                Some(v) => format!("{name}:{v}"),
                None => name.clone(),
            };
            match out
                .options
                .iter_mut()
                .find(|o| o.split(':').next() == Some(name.as_str()))
            {
                Some(o) => *o = formatted,
                None => out.options.push(formatted),
            }
        }
    }
    (out, warning)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn settings(cluster_dns: &[&str]) -> DnsSettings {
        DnsSettings {
            cluster_dns: cluster_dns.iter().map(|s| s.parse().unwrap()).collect(),
            cluster_domain: "cluster.local".into(),
            host: parse_resolv_conf(
                "# host\nnameserver 192.168.1.1\nsearch corp.example. lab\noptions edns0\n",
            ),
            ..Default::default()
        }
    }

    fn pod(spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([]);
        serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": "prod"}, "spec": spec}),
        )
        .unwrap()
    }

    #[test]
    fn cluster_first_searches_the_namespace_then_the_host_with_ndots_5() {
        let (dns, warning) = pod_dns(&pod(json!({})), &settings(&["10.43.0.10"]));
        assert_eq!(dns.servers, ["10.43.0.10"]);
        assert_eq!(
            dns.searches,
            [
                "prod.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "corp.example",
                "lab"
            ]
        );
        assert_eq!(dns.options, ["ndots:5"]);
        assert!(warning.is_none());
    }

    #[test]
    fn host_network_pods_use_the_host_unless_cluster_first_with_host_net() {
        let s = settings(&["10.43.0.10"]);
        let (dns, _) = pod_dns(&pod(json!({"hostNetwork": true})), &s);
        assert_eq!(dns.servers, ["192.168.1.1"]);
        assert_eq!(dns.options, ["edns0"]);
        let (dns, _) = pod_dns(
            &pod(json!({"hostNetwork": true, "dnsPolicy": "ClusterFirstWithHostNet"})),
            &s,
        );
        assert_eq!(dns.servers, ["10.43.0.10"]);
    }

    #[test]
    fn cluster_first_without_cluster_dns_falls_back_to_the_host_with_a_warning() {
        let (dns, warning) = pod_dns(&pod(json!({})), &settings(&[]));
        assert_eq!(dns.servers, ["192.168.1.1"]);
        assert_eq!(warning.unwrap(), missing_cluster_dns("ClusterFirst"));
    }

    #[test]
    fn dns_config_is_merged_and_none_uses_it_alone() {
        let config = json!({"nameservers": ["1.1.1.1", "10.43.0.10"], "searches": ["extra"],
            "options": [{"name": "ndots", "value": "2"}, {"name": "rotate"}]});
        let (dns, _) = pod_dns(
            &pod(json!({"dnsConfig": config})),
            &settings(&["10.43.0.10"]),
        );
        assert_eq!(dns.servers, ["10.43.0.10", "1.1.1.1"]);
        assert_eq!(dns.searches.last().unwrap(), "extra");
        assert_eq!(dns.options, ["ndots:2", "rotate"]);
        let (dns, _) = pod_dns(
            &pod(json!({"dnsPolicy": "None", "dnsConfig": {"nameservers": ["9.9.9.9"]}})),
            &settings(&["10.43.0.10"]),
        );
        assert_eq!(
            (dns.servers, dns.searches, dns.options),
            (vec!["9.9.9.9".to_string()], vec![], vec![])
        );
    }
}
