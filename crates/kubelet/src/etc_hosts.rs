//! The pod's managed /etc/hosts, as upstream's kubelet writes it (`managedHostsFileContent`):
//! a header, the localhost entries, the pod's IPs with its hostname (and
//! `hostname.subdomain.namespace.svc.cluster-domain` when it has a subdomain), then
//! `hostAliases`; for a hostNetwork pod, the node's own hosts file then `hostAliases`
//! (`nodeHostsFileContent`). Written to `{data_dir}/pods/{uid}/etc-hosts` and mounted at
//! /etc/hosts in every container.

use k8s_openapi::api::core::v1::Pod;

/// The pod's hostname (its `hostname`, else its name cut to 63 characters as upstream) and its
/// domain when it has a `subdomain`.
pub fn hostname_and_domain(pod: &Pod, cluster_domain: &str) -> (String, Option<String>) {
    let spec = pod.spec.as_ref();
    let hostname = match spec.and_then(|s| s.hostname.as_deref()) {
        Some(h) if !h.is_empty() => h.to_string(),
        _ => {
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            let cut: String = name.chars().take(63).collect();
            cut.trim_end_matches(['-', '.']).to_string()
        }
    };
    let domain = spec
        .and_then(|s| s.subdomain.as_deref())
        .filter(|d| !d.is_empty())
        .map(|sub| {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            format!("{sub}.{ns}.svc.{cluster_domain}")
        });
    (hostname, domain)
}

/// The file's content for the pod with these IPs.
pub fn content(pod: &Pod, pod_ips: &[String], cluster_domain: &str) -> String {
    let mut out = String::from(
        "# Kubernetes-managed hosts file.\n\
         127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         fe00::0\tip6-mcastprefix\n\
         fe00::1\tip6-allnodes\n\
         fe00::2\tip6-allrouters\n",
    );
    let (hostname, domain) = hostname_and_domain(pod, cluster_domain);
    for ip in pod_ips.iter().filter(|ip| !ip.is_empty()) {
        match &domain {
            Some(d) => out.push_str(&format!("{ip}\t{hostname}.{d}\t{hostname}\n")),
            None => out.push_str(&format!("{ip}\t{hostname}\n")),
        }
    }
    push_aliases(&mut out, pod);
    out
}

/// The file's content for a hostNetwork pod, from the node's hosts file.
pub fn host_network_content(pod: &Pod, node_hosts: &str) -> String {
    let mut out = format!("# Kubernetes-managed hosts file (host network).\n{node_hosts}");
    push_aliases(&mut out, pod);
    out
}

fn push_aliases(out: &mut String, pod: &Pod) {
    let aliases = pod.spec.as_ref().and_then(|s| s.host_aliases.as_ref());
    if let Some(aliases) = aliases.filter(|a| !a.is_empty()) {
        out.push_str("\n# Entries added by HostAliases.\n");
        for a in aliases {
            let names = a.hostnames.clone().unwrap_or_default().join("\t");
            out.push_str(&format!("{}\t{names}\n", a.ip));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web-0", "namespace": "prod"},
            "spec": spec,
        }))
        .unwrap()
    }

    const HEADER: &str = "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n";

    #[test]
    fn a_plain_pod_maps_its_ip_to_its_name() {
        let p = pod(json!({"containers": []}));
        let got = content(&p, &["10.42.0.7".into()], "cluster.local");
        assert_eq!(got, format!("{HEADER}10.42.0.7\tweb-0\n"));
    }

    #[test]
    fn a_host_network_pod_gets_the_node_hosts_file_and_its_aliases() {
        let p = pod(json!({"containers": [], "hostNetwork": true,
            "hostAliases": [{"ip": "10.1.2.3", "hostnames": ["db"]}]}));
        let got = host_network_content(&p, "127.0.0.1\tlocalhost\n");
        assert_eq!(
            got,
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1\tlocalhost\n\n\
             # Entries added by HostAliases.\n10.1.2.3\tdb\n"
        );
    }

    #[test]
    fn hostname_subdomain_and_aliases_are_written_as_upstream() {
        let p = pod(
            json!({"containers": [], "hostname": "db", "subdomain": "peers",
            "hostAliases": [{"ip": "127.0.0.1", "hostnames": ["foo.local", "bar.local"]},
                            {"ip": "10.1.2.3", "hostnames": ["foo.remote"]}]}),
        );
        let got = content(&p, &["10.42.0.7".into()], "cluster.local");
        assert_eq!(
            got,
            format!(
                "{HEADER}10.42.0.7\tdb.peers.prod.svc.cluster.local\tdb\n\n\
                 # Entries added by HostAliases.\n\
                 127.0.0.1\tfoo.local\tbar.local\n10.1.2.3\tfoo.remote\n"
            )
        );
    }
}
