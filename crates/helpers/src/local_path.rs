//! Skiff's node-local volumes (the role of k3s's local-path provisioner): the names the
//! controller manager's provisioner and each node's kubelet agree on, and where a volume's
//! directory lives. The provisioner only writes API objects; the kubelet of the volume's node
//! creates and removes the directory (the controller manager never touches another machine's
//! disk).

/// The provisioner of the default `local-path` StorageClass, written on every volume it makes
/// (`pv.kubernetes.io/provisioned-by`). In Skiff's own namespace rather than k3s's
/// `rancher.io/local-path`: Skiff does not implement rancher's provisioner (its ConfigMap, its
/// helper pods), and a cluster that also installs rancher's keeps the two apart instead of
/// having two controllers claim the same volumes.
pub const PROVISIONER: &str = "skiff.dev/local-path";

/// The default StorageClass `skiff server` creates (k3s's name).
pub const CLASS: &str = "local-path";

/// The node annotation in which a kubelet publishes the directory under which its local-path
/// volumes live, so that the provisioner never guesses another machine's layout.
pub const ANN_NODE_DIR: &str = "skiff.dev/local-path-dir";

/// The label on a provisioned volume naming its node (when the name is a valid label value),
/// so that each kubelet watches only its own volumes through a label selector.
pub const LABEL_NODE: &str = "skiff.dev/local-path-node";

/// The directory of the kubelet's data dir under which local-path volumes live (k3s's
/// `/var/lib/rancher/k3s/storage`).
pub const DATA_SUBDIR: &str = "storage";

/// The directory of a claim's volume under a node's local-path directory: k3s's
/// `<volume>_<namespace>_<claim>`.
pub fn volume_dir(base: &str, volume: &str, namespace: &str, claim: &str) -> String {
    format!(
        "{}/{volume}_{namespace}_{claim}",
        base.trim_end_matches('/')
    )
}

/// Whether `value` may be a label value (at most 63 characters of alphanumerics, `-`, `_`
/// and `.`, beginning and ending with an alphanumeric).
pub fn is_label_value(value: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    value.len() <= 63
        && (value.is_empty()
            || (value.starts_with(alnum)
                && value.ends_with(alnum)
                && value
                    .chars()
                    .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))))
}

/// Whether `path` is strictly below `base` with no `..` (what a kubelet checks before removing
/// a volume's directory).
pub fn is_below(path: &str, base: &str) -> bool {
    let base = base.trim_end_matches('/');
    let Some(rest) = path.strip_prefix(base).and_then(|r| r.strip_prefix('/')) else {
        return false;
    };
    !base.is_empty()
        && !rest.is_empty()
        && rest
            .split('/')
            .all(|part| !part.is_empty() && part != ".." && part != ".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_directory_is_named_as_k3s_names_it() {
        assert_eq!(
            volume_dir("/var/lib/skiff/storage/", "pvc-1", "prod", "data"),
            "/var/lib/skiff/storage/pvc-1_prod_data"
        );
    }

    #[test]
    fn only_paths_strictly_below_the_base_are_below_it() {
        assert!(is_below("/d/storage/pvc-1_a_b", "/d/storage"));
        assert!(is_below("/d/storage/pvc-1_a_b", "/d/storage/"));
        assert!(!is_below("/d/storage", "/d/storage"));
        assert!(!is_below("/d/storage/", "/d/storage"));
        assert!(!is_below("/d/storagex/pvc", "/d/storage"));
        assert!(!is_below("/d/storage/../etc", "/d/storage"));
        assert!(!is_below("/etc", ""));
    }

    #[test]
    fn label_values_are_checked_as_the_api_checks_them() {
        assert!(is_label_value("node-1.example"));
        assert!(!is_label_value("-node"));
        assert!(!is_label_value(&"n".repeat(64)));
    }
}
