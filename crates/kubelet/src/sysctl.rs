//! A pod's `securityContext.sysctls` at admission, as upstream's `pkg/kubelet/sysctl`: a sysctl
//! is allowed when it is one of the safe sysctls this kernel namespaces (upstream's
//! `safe_sysctls.go`, some only from a kernel version on) or matches the kubelet's
//! `--allowed-unsafe-sysctls` (names, or prefixes ending in `*`), and the pod does not share the
//! namespace it belongs to with the host (a `net.*` sysctl with `hostNetwork`, an IPC one with
//! `hostIPC`). Anything else rejects the pod with upstream's `SysctlForbidden`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use crate::admission::Rejection;

/// Upstream's admission reason for a pod with a sysctl that is not allowed.
pub const FORBIDDEN_REASON: &str = "SysctlForbidden";

/// Upstream's limit on a sysctl name or pattern.
const MAX_LENGTH: usize = 253;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error(
        "sysctl {0:?} must have at most {MAX_LENGTH} characters and match regex \
         ([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?(\\*)?"
    )]
    Pattern(String),
    #[error("the sysctls {0:?} are not known to be namespaced")]
    NotNamespaced(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The kernel namespace a sysctl belongs to (upstream's `NamespacedBy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Namespace {
    Ipc,
    Net,
}

impl Namespace {
    fn of(name: &str) -> Option<Namespace> {
        if name == "kernel.sem" {
            return Some(Namespace::Ipc);
        }
        [
            ("kernel.shm", Namespace::Ipc),
            ("kernel.msg", Namespace::Ipc),
            ("fs.mqueue.", Namespace::Ipc),
            ("net.", Namespace::Net),
        ]
        .into_iter()
        .find(|(prefix, _)| name.starts_with(prefix))
        .map(|(_, ns)| ns)
    }

    fn name(self) -> &'static str {
        match self {
            Namespace::Ipc => "ipc",
            Namespace::Net => "net",
        }
    }
}

/// Upstream's safe sysctls, each with the kernel version (major, minor) from which the kernel
/// namespaces it, if it needs one.
const SAFE: &[(&str, Option<(u32, u32)>)] = &[
    ("kernel.shm_rmid_forced", None),
    ("net.ipv4.ip_local_port_range", None),
    ("net.ipv4.tcp_syncookies", None),
    ("net.ipv4.ping_group_range", None),
    ("net.ipv4.ip_unprivileged_port_start", None),
    ("net.ipv4.ip_local_reserved_ports", Some((3, 16))),
    ("net.ipv4.tcp_keepalive_time", Some((4, 5))),
    ("net.ipv4.tcp_fin_timeout", Some((4, 6))),
    ("net.ipv4.tcp_keepalive_intvl", Some((4, 5))),
    ("net.ipv4.tcp_keepalive_probes", Some((4, 5))),
    ("net.ipv4.tcp_rmem", None),
    ("net.ipv4.tcp_wmem", None),
];

/// The safe sysctls of a kernel of this version (unknown: only those every kernel namespaces).
pub fn safe_sysctls(kernel: Option<(u32, u32)>) -> Vec<String> {
    SAFE.iter()
        .filter(|(_, since)| since.is_none_or(|since| kernel.is_some_and(|k| k >= since)))
        .map(|(name, _)| name.to_string())
        .collect()
}

/// The running kernel's (major, minor) version, from `/proc/sys/kernel/osrelease`.
pub fn kernel_version() -> Option<(u32, u32)> {
    parse_kernel_version(&std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?)
}

fn parse_kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// A sysctl name with `.` separators: one written with `/` (`net/ipv4/tcp_rmem`) has its
/// separators swapped, as upstream normalizes.
pub fn normalize(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect(),
        _ => name.to_string(),
    }
}

/// The sysctls a pod may set on this node: exact names and prefixes, each with its namespace.
#[derive(Debug, Clone)]
pub struct Allowlist {
    sysctls: BTreeMap<String, Namespace>,
    prefixes: BTreeMap<String, Namespace>,
}

impl Allowlist {
    /// The safe sysctls of this kernel plus `allowed_unsafe` (upstream's
    /// `--allowed-unsafe-sysctls`); a pattern that is malformed or not namespaced is an error.
    pub fn new(kernel: Option<(u32, u32)>, allowed_unsafe: &[String]) -> Result<Allowlist> {
        let mut list = Allowlist {
            sysctls: BTreeMap::new(),
            prefixes: BTreeMap::new(),
        };
        for pattern in safe_sysctls(kernel).iter().chain(allowed_unsafe) {
            if !valid_pattern(pattern) {
                return Err(Error::Pattern(pattern.clone()));
            }
            let pattern = normalize(pattern);
            match pattern.strip_suffix('*') {
                Some(prefix) => {
                    let ns = Namespace::of(prefix).ok_or(Error::NotNamespaced(pattern.clone()))?;
                    list.prefixes.insert(prefix.to_string(), ns);
                }
                None => {
                    let ns =
                        Namespace::of(&pattern).ok_or(Error::NotNamespaced(pattern.clone()))?;
                    list.sysctls.insert(pattern, ns);
                }
            }
        }
        Ok(list)
    }

    /// Why `name` may not be set by a pod with these host namespaces, if it may not.
    fn validate(&self, name: &str, host_network: bool, host_ipc: bool) -> Result<(), String> {
        let name = normalize(name);
        let ns = self.sysctls.get(&name).copied().or_else(|| {
            self.prefixes
                .iter()
                .find(|(prefix, _)| name.starts_with(prefix.as_str()))
                .map(|(_, ns)| *ns)
        });
        match ns {
            None => Err(format!("{name:?} not allowlisted")),
            Some(ns @ Namespace::Ipc) if host_ipc => Err(format!(
                "{name:?} not allowed with host {} enabled",
                ns.name()
            )),
            Some(ns @ Namespace::Net) if host_network => Err(format!(
                "{name:?} not allowed with host {} enabled",
                ns.name()
            )),
            Some(_) => Ok(()),
        }
    }

    /// Admits the pod unless one of its sysctls is not allowed (upstream's
    /// `patternAllowlist.Admit`).
    pub fn admit(&self, pod: &Pod) -> Result<(), Rejection> {
        let Some(spec) = pod.spec.as_ref() else {
            return Ok(());
        };
        let sysctls = spec
            .security_context
            .as_ref()
            .and_then(|s| s.sysctls.as_ref());
        let (host_network, host_ipc) = (
            spec.host_network.unwrap_or(false),
            spec.host_ipc.unwrap_or(false),
        );
        for sysctl in sysctls.into_iter().flatten() {
            if let Err(why) = self.validate(&sysctl.name, host_network, host_ipc) {
                return Err(Rejection {
                    reason: FORBIDDEN_REASON.into(),
                    message: format!("forbidden sysctl: {why}"),
                });
            }
        }
        Ok(())
    }
}

impl Default for Allowlist {
    /// The sysctls every kernel namespaces, nothing unsafe.
    fn default() -> Self {
        Allowlist::new(None, &[]).expect("the safe sysctls are namespaced")
    }
}

/// Upstream's sysctl pattern: segments of `[a-z0-9]([-_a-z0-9]*[a-z0-9])?` separated by `.` or
/// `/`, optionally ending in `*`, at most 253 characters.
fn valid_pattern(pattern: &str) -> bool {
    if pattern.len() > MAX_LENGTH {
        return false;
    }
    let body = pattern.strip_suffix('*').unwrap_or(pattern);
    let segment = |s: &str| {
        let b = s.as_bytes();
        let edge = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        !b.is_empty()
            && b.first().is_some_and(edge)
            && b.last().is_some_and(edge)
            && b.iter().all(|c| edge(c) || *c == b'-' || *c == b'_')
    };
    // a pattern may end in a separator before its `*` (`net.*`)
    let body = if body.len() < pattern.len() {
        body.strip_suffix(['.', '/']).unwrap_or(body)
    } else {
        body
    };
    body.split(['.', '/']).all(segment)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        let mut p = json!({"metadata": {"name": "p"},
                           "spec": {"containers": [{"name": "c"}]}});
        for (k, v) in spec.as_object().unwrap() {
            p["spec"][k] = v.clone();
        }
        serde_json::from_value(p).unwrap()
    }

    fn sysctls(names: &[&str]) -> serde_json::Value {
        let list: Vec<_> = names
            .iter()
            .map(|n| json!({"name": n, "value": "1"}))
            .collect();
        json!({"sysctls": list})
    }

    fn rejected(list: &Allowlist, spec: serde_json::Value) -> Option<String> {
        list.admit(&pod(spec)).err().map(|r| {
            assert_eq!(r.reason, FORBIDDEN_REASON);
            r.message
        })
    }

    #[test]
    fn safe_sysctls_pass_and_others_are_forbidden_with_upstreams_message() {
        let list = Allowlist::new(Some((6, 1)), &[]).unwrap();
        let safe = sysctls(&["kernel.shm_rmid_forced", "net.ipv4.tcp_fin_timeout"]);
        assert_eq!(rejected(&list, json!({"securityContext": safe})), None);
        assert_eq!(
            rejected(
                &list,
                json!({"securityContext": sysctls(&["kernel.msgmax"])})
            ),
            Some(r#"forbidden sysctl: "kernel.msgmax" not allowlisted"#.into())
        );
        assert_eq!(rejected(&list, json!({})), None, "no sysctls");
    }

    #[test]
    fn sysctls_of_a_namespace_shared_with_the_host_are_forbidden() {
        let list = Allowlist::new(Some((6, 1)), &["kernel.msg*".into()]).unwrap();
        let net = json!({"hostNetwork": true,
                         "securityContext": sysctls(&["net.ipv4.tcp_syncookies"])});
        assert_eq!(
            rejected(&list, net),
            Some(
                r#"forbidden sysctl: "net.ipv4.tcp_syncookies" not allowed with host net enabled"#
                    .into()
            )
        );
        let ipc = json!({"hostIPC": true, "securityContext": sysctls(&["kernel.msgmax"])});
        assert_eq!(
            rejected(&list, ipc),
            Some(r#"forbidden sysctl: "kernel.msgmax" not allowed with host ipc enabled"#.into())
        );
        let ipc_on_host_network = json!({"hostNetwork": true,
                                         "securityContext": sysctls(&["kernel.msgmax"])});
        assert_eq!(rejected(&list, ipc_on_host_network), None);
    }

    #[test]
    fn allowed_unsafe_sysctls_are_names_or_prefixes_and_must_be_namespaced() {
        let list =
            Allowlist::new(None, &["net.core.somaxconn".into(), "kernel.msg*".into()]).unwrap();
        let spec = json!({"securityContext": sysctls(&["net.core.somaxconn", "kernel.msgmnb"])});
        assert_eq!(rejected(&list, spec), None);
        assert!(
            rejected(
                &list,
                json!({"securityContext": sysctls(&["net.core.rmem_max"])})
            )
            .is_some()
        );
        let slashes = json!({"securityContext": sysctls(&["net/core/somaxconn"])});
        assert_eq!(
            rejected(&list, slashes),
            None,
            "slash separators are normalized"
        );

        assert_eq!(
            Allowlist::new(None, &["vm.swappiness".into()]).unwrap_err(),
            Error::NotNamespaced("vm.swappiness".into())
        );
        assert!(matches!(
            Allowlist::new(None, &["Net.Core".into()]),
            Err(Error::Pattern(_))
        ));
        assert!(Allowlist::new(None, &["net.*".into()]).is_ok());
    }

    #[test]
    fn kernel_dependent_safe_sysctls_need_their_kernel() {
        let old = safe_sysctls(Some((4, 4)));
        assert!(old.contains(&"net.ipv4.ip_local_reserved_ports".to_string()));
        assert!(!old.contains(&"net.ipv4.tcp_keepalive_time".to_string()));
        assert!(!safe_sysctls(None).contains(&"net.ipv4.ip_local_reserved_ports".to_string()));
        assert_eq!(safe_sysctls(Some((6, 18))).len(), SAFE.len());
        assert_eq!(parse_kernel_version("6.18.44-fc-v1045\n"), Some((6, 18)));
    }
}
