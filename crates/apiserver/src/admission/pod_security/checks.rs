//! The Pod Security Standards' checks (upstream's `pod-security-admission/policy`, latest
//! version): the baseline checks, then the restricted ones, each in upstream's order, each
//! answering with upstream's forbidden reason and detail.

use std::collections::BTreeSet;

use serde_json::Value;

/// A level of the Pod Security Standards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Unrestricted.
    Privileged,
    /// Prevents known privilege escalations.
    Baseline,
    /// Current pod hardening best practice.
    Restricted,
}

impl Level {
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "privileged" => Some(Level::Privileged),
            "baseline" => Some(Level::Baseline),
            "restricted" => Some(Level::Restricted),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// One failed check: upstream's `ForbiddenReason` and `ForbiddenDetail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub reason: String,
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.detail.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{} ({})", self.reason, self.detail)
        }
    }
}

fn violation(reason: &str, detail: String) -> Option<Violation> {
    Some(Violation {
        reason: reason.to_string(),
        detail,
    })
}

fn pluralize<'a>(one: &'a str, many: &'a str, n: usize) -> &'a str {
    if n == 1 { one } else { many }
}

/// `"a", "b"` as upstream's `joinQuote`.
fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    items
        .iter()
        .map(|s| format!("{:?}", s.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `container "a"` / `containers "a", "b"`.
fn containers_phrase(names: &[String]) -> String {
    format!(
        "{} {}",
        pluralize("container", "containers", names.len()),
        join_quote(names)
    )
}

/// The pod's metadata and spec, as a check sees them.
pub struct PodView<'a> {
    pub meta: &'a Value,
    pub spec: &'a Value,
}

impl PodView<'_> {
    /// Init containers, containers and ephemeral containers (upstream's `visitContainers`).
    fn containers(&self) -> impl Iterator<Item = &Value> {
        ["initContainers", "containers", "ephemeralContainers"]
            .into_iter()
            .flat_map(|f| self.spec[f].as_array().into_iter().flatten())
    }

    fn name(c: &Value) -> String {
        c["name"].as_str().unwrap_or("").to_string()
    }

    fn names_where(&self, mut pred: impl FnMut(&Value) -> bool) -> Vec<String> {
        self.containers()
            .filter(|c| pred(c))
            .map(Self::name)
            .collect()
    }

    fn pod_sc(&self) -> &Value {
        &self.spec["securityContext"]
    }

    fn annotations(&self) -> impl Iterator<Item = (&String, &str)> {
        self.meta["annotations"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k, v.as_str().unwrap_or("")))
    }

    /// User-namespaced pods (`hostUsers: false`) are exempt from the run-as-root checks.
    fn user_namespaced(&self) -> bool {
        self.spec["hostUsers"] == Value::Bool(false)
    }
}

/// `pod`, `container "a"`, `pod and containers "a", "b"`: who set a bad value.
fn setters(pod: bool, containers: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    if pod {
        out.push("pod".to_string());
    }
    if !containers.is_empty() {
        out.push(containers_phrase(containers));
    }
    out
}

fn app_armor(p: &PodView<'_>) -> Option<Violation> {
    let allowed_annotation =
        |v: &str| v.is_empty() || v == "runtime/default" || v.starts_with("localhost/");
    let allowed_type = |sc: &Value| !matches!(sc["appArmorProfile"]["type"].as_str(), Some(t) if t != "RuntimeDefault" && t != "Localhost");
    let mut bad: Vec<String> = p
        .annotations()
        .filter(|(k, v)| {
            k.starts_with("container.apparmor.security.beta.kubernetes.io/")
                && !allowed_annotation(v)
        })
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    if !allowed_type(p.pod_sc()) {
        bad.push(format!(
            "pod securityContext.appArmorProfile.type={:?}",
            p.pod_sc()["appArmorProfile"]["type"].as_str().unwrap_or("")
        ));
    }
    for c in p
        .containers()
        .filter(|c| !allowed_type(&c["securityContext"]))
    {
        bad.push(format!(
            "container {:?} securityContext.appArmorProfile.type={:?}",
            PodView::name(c),
            c["securityContext"]["appArmorProfile"]["type"]
                .as_str()
                .unwrap_or("")
        ));
    }
    if bad.is_empty() {
        return None;
    }
    bad.sort();
    violation(
        pluralize(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            bad.len(),
        ),
        bad.join(", "),
    )
}

/// Capabilities a container may add under baseline (upstream's default set).
const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn strings(v: &Value) -> impl Iterator<Item = &str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str)
}

fn added_capabilities(p: &PodView<'_>, allowed: &[&str]) -> Option<(Vec<String>, Vec<String>)> {
    let mut caps = BTreeSet::new();
    let mut names = Vec::new();
    for c in p.containers() {
        let bad: Vec<&str> = strings(&c["securityContext"]["capabilities"]["add"])
            .filter(|cap| !allowed.contains(cap))
            .collect();
        if !bad.is_empty() {
            names.push(PodView::name(c));
            caps.extend(bad.into_iter().map(str::to_string));
        }
    }
    (!names.is_empty()).then(|| (names, caps.into_iter().collect()))
}

fn capabilities_baseline(p: &PodView<'_>) -> Option<Violation> {
    let (names, caps) = added_capabilities(p, BASELINE_CAPABILITIES)?;
    violation(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&names),
            join_quote(&caps)
        ),
    )
}

fn host_namespaces(p: &PodView<'_>) -> Option<Violation> {
    let set: Vec<String> = ["hostNetwork", "hostPID", "hostIPC"]
        .into_iter()
        .filter(|f| p.spec[*f] == Value::Bool(true))
        .map(|f| format!("{f}=true"))
        .collect();
    (!set.is_empty()).then(|| Violation {
        reason: "host namespaces".into(),
        detail: set.join(", "),
    })
}

fn volumes<'a>(p: &'a PodView<'a>) -> impl Iterator<Item = &'a Value> {
    p.spec["volumes"].as_array().into_iter().flatten()
}

fn host_path_volumes(p: &PodView<'_>) -> Option<Violation> {
    let names: Vec<String> = volumes(p)
        .filter(|v| v.get("hostPath").is_some_and(|h| !h.is_null()))
        .map(PodView::name)
        .collect();
    if names.is_empty() {
        return None;
    }
    violation(
        "hostPath volumes",
        format!(
            "{} {}",
            pluralize("volume", "volumes", names.len()),
            join_quote(&names)
        ),
    )
}

fn host_ports(p: &PodView<'_>) -> Option<Violation> {
    let mut ports = BTreeSet::new();
    let mut names = Vec::new();
    for c in p.containers() {
        let own: Vec<String> = c["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|port| port["hostPort"].as_i64().filter(|h| *h != 0))
            .map(|h| h.to_string())
            .collect();
        if !own.is_empty() {
            names.push(PodView::name(c));
            ports.extend(own);
        }
    }
    if names.is_empty() {
        return None;
    }
    let ports: Vec<String> = ports.into_iter().collect();
    violation(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&names),
            pluralize("uses", "use", names.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

fn privileged(p: &PodView<'_>) -> Option<Violation> {
    let names = p.names_where(|c| c["securityContext"]["privileged"] == Value::Bool(true));
    if names.is_empty() {
        return None;
    }
    violation(
        "privileged",
        format!(
            "{} must not set securityContext.privileged=true",
            containers_phrase(&names)
        ),
    )
}

fn proc_mount(p: &PodView<'_>) -> Option<Violation> {
    let mut values = BTreeSet::new();
    let names = p.names_where(|c| match c["securityContext"]["procMount"].as_str() {
        None | Some("" | "Default") => false,
        Some(v) => {
            values.insert(v.to_string());
            true
        }
    });
    if names.is_empty() {
        return None;
    }
    let values: Vec<String> = values.into_iter().collect();
    violation(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_phrase(&names),
            join_quote(&values)
        ),
    )
}

const SELINUX_TYPES: &[&str] = &[
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

fn se_linux(p: &PodView<'_>) -> Option<Violation> {
    let mut types = BTreeSet::new();
    let (mut user, mut role) = (false, false);
    let mut valid = |o: &Value| {
        if o.is_null() {
            return true;
        }
        let mut ok = true;
        let t = o["type"].as_str().unwrap_or("");
        if !SELINUX_TYPES.contains(&t) {
            ok = false;
            types.insert(t.to_string());
        }
        if !o["user"].as_str().unwrap_or("").is_empty() {
            ok = false;
            user = true;
        }
        if !o["role"].as_str().unwrap_or("").is_empty() {
            ok = false;
            role = true;
        }
        ok
    };
    let pod_bad = !valid(&p.pod_sc()["seLinuxOptions"]);
    let names: Vec<String> = p
        .containers()
        .filter(|c| !valid(&c["securityContext"]["seLinuxOptions"]))
        .map(PodView::name)
        .collect();
    let who = setters(pod_bad, &names);
    if who.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !types.is_empty() {
        let types: Vec<String> = types.into_iter().collect();
        data.push(format!(
            "{} {}",
            pluralize("type", "types", types.len()),
            join_quote(&types)
        ));
    }
    if user {
        data.push("user may not be set".to_string());
    }
    if role {
        data.push("role may not be set".to_string());
    }
    violation(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            who.join(" and "),
            data.join("; ")
        ),
    )
}

fn valid_seccomp(t: &str) -> bool {
    t == "RuntimeDefault" || t == "Localhost"
}

/// Who sets a seccomp profile type other than RuntimeDefault or Localhost, the bad values, and
/// the containers that set none (nor inherit a valid pod one).
fn seccomp(p: &PodView<'_>) -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut values = BTreeSet::new();
    let pod_profile = &p.pod_sc()["seccompProfile"];
    let pod_type = pod_profile["type"].as_str().unwrap_or("");
    let pod_bad = !pod_profile.is_null() && !valid_seccomp(pod_type);
    if pod_bad {
        values.insert(pod_type.to_string());
    }
    let pod_set = !pod_profile.is_null() && !pod_bad;
    let (mut bad, mut unset) = (Vec::new(), Vec::new());
    for c in p.containers() {
        let profile = &c["securityContext"]["seccompProfile"];
        if profile.is_null() {
            if !pod_set {
                unset.push(PodView::name(c));
            }
        } else {
            let t = profile["type"].as_str().unwrap_or("");
            if !valid_seccomp(t) {
                bad.push(PodView::name(c));
                values.insert(t.to_string());
            }
        }
    }
    (setters(pod_bad, &bad), values.into_iter().collect(), unset)
}

fn seccomp_bad(who: &[String], values: &[String]) -> Option<Violation> {
    violation(
        "seccompProfile",
        format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            who.join(" and "),
            join_quote(values)
        ),
    )
}

fn seccomp_baseline(p: &PodView<'_>) -> Option<Violation> {
    let (who, values, _) = seccomp(p);
    if who.is_empty() {
        None
    } else {
        seccomp_bad(&who, &values)
    }
}

/// The sysctls baseline allows (upstream's list as of the latest policy version).
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

fn sysctls(p: &PodView<'_>) -> Option<Violation> {
    let bad: Vec<&str> = p.pod_sc()["sysctls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .filter(|n| !SAFE_SYSCTLS.contains(n))
        .collect();
    (!bad.is_empty()).then(|| Violation {
        reason: "forbidden sysctls".into(),
        detail: bad.join(", "),
    })
}

fn windows_host_process(p: &PodView<'_>) -> Option<Violation> {
    let host = |sc: &Value| sc["windowsOptions"]["hostProcess"] == Value::Bool(true);
    let names = p.names_where(|c| host(&c["securityContext"]));
    let who = setters(host(p.pod_sc()), &names);
    if who.is_empty() {
        return None;
    }
    violation(
        "hostProcess",
        format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            who.join(" and ")
        ),
    )
}

fn allow_privilege_escalation(p: &PodView<'_>) -> Option<Violation> {
    let names =
        p.names_where(|c| c["securityContext"]["allowPrivilegeEscalation"] != Value::Bool(false));
    if names.is_empty() {
        return None;
    }
    violation(
        "allowPrivilegeEscalation != false",
        format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_phrase(&names)
        ),
    )
}

fn capabilities_restricted(p: &PodView<'_>) -> Option<Violation> {
    let missing = p.names_where(|c| {
        !strings(&c["securityContext"]["capabilities"]["drop"]).any(|d| d == "ALL")
    });
    let mut details = Vec::new();
    if !missing.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_phrase(&missing)
        ));
    }
    if let Some((names, caps)) = added_capabilities(p, &["NET_BIND_SERVICE"]) {
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&names),
            join_quote(&caps)
        ));
    }
    if details.is_empty() {
        return None;
    }
    violation("unrestricted capabilities", details.join("; "))
}

/// Volume sources restricted pods may use.
const ALLOWED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

fn restricted_volumes(p: &PodView<'_>) -> Option<Violation> {
    let mut names = Vec::new();
    let mut types = BTreeSet::new();
    for v in volumes(p) {
        let bad: Vec<&String> = v
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, val)| {
                *k != "name" && !val.is_null() && !ALLOWED_VOLUMES.contains(&k.as_str())
            })
            .map(|(k, _)| k)
            .collect();
        if !bad.is_empty() {
            names.push(PodView::name(v));
            types.extend(bad.into_iter().cloned());
        }
    }
    if names.is_empty() {
        return None;
    }
    let types: Vec<String> = types.into_iter().collect();
    violation(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", names.len()),
            join_quote(&names),
            pluralize("uses", "use", names.len()),
            pluralize(
                "restricted volume type",
                "restricted volume types",
                types.len()
            ),
            join_quote(&types)
        ),
    )
}

fn run_as_non_root(p: &PodView<'_>) -> Option<Violation> {
    if p.user_namespaced() {
        return None;
    }
    let pod_value = &p.pod_sc()["runAsNonRoot"];
    let pod_false = *pod_value == Value::Bool(false);
    let pod_true = *pod_value == Value::Bool(true);
    let explicit = p.names_where(|c| c["securityContext"]["runAsNonRoot"] == Value::Bool(false));
    let implicit = p.names_where(|c| c["securityContext"]["runAsNonRoot"].is_null() && !pod_true);
    let who = setters(pod_false, &explicit);
    if !who.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                who.join(" and ")
            ),
        );
    }
    if implicit.is_empty() {
        return None;
    }
    violation(
        "runAsNonRoot != true",
        format!(
            "pod or {} must set securityContext.runAsNonRoot=true",
            containers_phrase(&implicit)
        ),
    )
}

fn run_as_user(p: &PodView<'_>) -> Option<Violation> {
    if p.user_namespaced() {
        return None;
    }
    let root = |sc: &Value| sc["runAsUser"].as_i64() == Some(0);
    let names = p.names_where(|c| root(&c["securityContext"]));
    let who = setters(root(p.pod_sc()), &names);
    if who.is_empty() {
        return None;
    }
    violation(
        "runAsUser=0",
        format!("{} must not set runAsUser=0", who.join(" and ")),
    )
}

fn seccomp_restricted(p: &PodView<'_>) -> Option<Violation> {
    let (who, values, unset) = seccomp(p);
    if !who.is_empty() {
        return seccomp_bad(&who, &values);
    }
    if unset.is_empty() {
        return None;
    }
    violation(
        "seccompProfile",
        format!(
            "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
            containers_phrase(&unset)
        ),
    )
}

type Check = fn(&PodView<'_>) -> Option<Violation>;

/// Baseline checks in upstream's order, and whether restricted replaces them.
const BASELINE: &[(Check, bool)] = &[
    (app_armor, false),
    (capabilities_baseline, true),
    (host_namespaces, false),
    (host_path_volumes, true),
    (host_ports, false),
    (privileged, false),
    (proc_mount, false),
    (se_linux, false),
    (seccomp_baseline, true),
    (sysctls, false),
    (windows_host_process, false),
];

const RESTRICTED: &[Check] = &[
    allow_privilege_escalation,
    capabilities_restricted,
    restricted_volumes,
    run_as_non_root,
    run_as_user,
    seccomp_restricted,
];

/// What a pod violates at `level`, in upstream's order.
pub fn evaluate(level: Level, meta: &Value, spec: &Value) -> Vec<Violation> {
    let p = PodView { meta, spec };
    match level {
        Level::Privileged => Vec::new(),
        Level::Baseline => BASELINE.iter().filter_map(|(c, _)| c(&p)).collect(),
        Level::Restricted => BASELINE
            .iter()
            .filter(|(_, replaced)| !replaced)
            .map(|(c, _)| *c)
            .chain(RESTRICTED.iter().copied())
            .filter_map(|c| c(&p))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn show(level: Level, spec: Value) -> Vec<String> {
        evaluate(level, &json!({}), &spec)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_bare_pod_passes_baseline_and_fails_the_four_restricted_checks() {
        let spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
        assert!(show(Level::Baseline, spec.clone()).is_empty());
        assert_eq!(
            show(Level::Restricted, spec),
            [
                "allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false)",
                "unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"])",
                "runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true)",
                "seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")",
            ]
        );
    }

    #[test]
    fn a_hardened_pod_passes_restricted() {
        let spec = json!({"securityContext": {"runAsNonRoot": true,
                                              "seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [{"name": "v", "emptyDir": {}}],
            "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}]});
        assert!(show(Level::Restricted, spec).is_empty());
    }

    #[test]
    fn baseline_refuses_host_access_with_upstreams_details() {
        let spec = json!({"hostNetwork": true, "hostPID": true,
            "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}],
                                "seLinuxOptions": {"type": "spc_t"}},
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
            "containers": [
                {"name": "a", "ports": [{"containerPort": 80, "hostPort": 80}],
                 "securityContext": {"privileged": true, "procMount": "Unmasked",
                                     "capabilities": {"add": ["NET_ADMIN", "CHOWN", "SYS_TIME"]}}},
                {"name": "b", "ports": [{"containerPort": 443, "hostPort": 443}],
                 "securityContext": {"seccompProfile": {"type": "Unconfined"},
                                     "appArmorProfile": {"type": "Unconfined"}}}]});
        assert_eq!(
            show(Level::Baseline, spec),
            [
                "forbidden AppArmor profile (container \"b\" securityContext.appArmorProfile.type=\"Unconfined\")",
                "non-default capabilities (container \"a\" must not include \"NET_ADMIN\", \"SYS_TIME\" in securityContext.capabilities.add)",
                "host namespaces (hostNetwork=true, hostPID=true)",
                "hostPath volumes (volume \"root\")",
                "hostPort (containers \"a\", \"b\" use hostPorts 443, 80)",
                "privileged (container \"a\" must not set securityContext.privileged=true)",
                "procMount (container \"a\" must not set securityContext.procMount to \"Unmasked\")",
                "seLinuxOptions (pod set forbidden securityContext.seLinuxOptions: type \"spc_t\")",
                "seccompProfile (container \"b\" must not set securityContext.seccompProfile.type to \"Unconfined\")",
                "forbidden sysctls (kernel.msgmax)",
            ]
        );
    }

    #[test]
    fn restricted_names_volume_types_root_users_and_added_capabilities() {
        let spec = json!({"securityContext": {"runAsNonRoot": true, "runAsUser": 0,
                                              "seccompProfile": {"type": "Localhost"}},
            "volumes": [{"name": "n", "nfs": {"server": "x", "path": "/"}}, {"name": "s", "secret": {}}],
            "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}}]});
        assert_eq!(
            show(Level::Restricted, spec),
            [
                "unrestricted capabilities (container \"c\" must not include \"SYS_ADMIN\" in securityContext.capabilities.add)",
                "restricted volume types (volume \"n\" uses restricted volume type \"nfs\")",
                "runAsUser=0 (pod must not set runAsUser=0)",
            ]
        );
    }
}
