//! Unit tests of [`super`]: the CRI security contexts from pod and container fields.

use serde_json::json;

use super::*;

fn pod(pod_sc: serde_json::Value, container_sc: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "prod", "uid": "u1"},
        "spec": {"securityContext": pod_sc,
                 "containers": [{"name": "c", "securityContext": container_sc}]},
    }))
    .unwrap()
}

fn first(p: &Pod) -> &Container {
    &p.spec.as_ref().unwrap().containers[0]
}

fn root() -> ImageUser {
    ImageUser::of(None)
}

fn container_sc(p: &Pod, image: &ImageUser) -> LinuxContainerSecurityContext {
    container(p, first(p), image, &NodeSecurity::default(), &[]).unwrap()
}

#[test]
fn the_containers_user_and_group_win_over_the_pods() {
    let p = pod(
        json!({"runAsUser": 1000, "runAsGroup": 3000, "runAsNonRoot": true}),
        json!({"runAsUser": 2000}),
    );
    let sc = effective(&p, first(&p));
    assert_eq!(
        (sc.run_as_user, sc.run_as_group, sc.run_as_non_root),
        (Some(2000), Some(3000), Some(true))
    );
    let cri = container_sc(&p, &root());
    assert_eq!(cri.run_as_user, Some(Int64Value { value: 2000 }));
    assert_eq!(cri.run_as_group, Some(Int64Value { value: 3000 }));
    assert_eq!(cri.run_as_username, "");

    let pod_only = pod(json!({"runAsUser": 1000}), json!(null));
    assert_eq!(
        container_sc(&pod_only, &root()).run_as_user,
        Some(Int64Value { value: 1000 })
    );
}

#[test]
fn without_run_as_user_the_images_uid_or_user_name_is_used() {
    let p = pod(json!({}), json!({}));
    let numeric = ImageUser {
        uid: Some(1000),
        username: String::new(),
    };
    assert_eq!(
        container_sc(&p, &numeric).run_as_user,
        Some(Int64Value { value: 1000 })
    );
    let named = ImageUser {
        uid: None,
        username: "nobody".into(),
    };
    let sc = container_sc(&p, &named);
    assert_eq!(
        (sc.run_as_user, sc.run_as_username.as_str()),
        (None, "nobody")
    );
    assert_eq!(
        container_sc(&p, &root()).run_as_user,
        Some(Int64Value { value: 0 }),
        "an image without a user runs as root"
    );
}

#[test]
fn fs_group_supplemental_and_volume_groups_go_to_the_sandbox_and_every_container() {
    let p = pod(
        json!({"fsGroup": 2000, "supplementalGroups": [5, 6],
               "supplementalGroupsPolicy": "Strict"}),
        json!(null),
    );
    let sc = container_sc(&p, &root());
    assert_eq!(sc.supplemental_groups, [2000, 5, 6]);
    assert_eq!(
        sc.supplemental_groups_policy,
        i32::from(SupplementalGroupsPolicy::Strict)
    );
    let (sandbox_sc, _) = sandbox(&p, &[]);
    assert_eq!(sandbox_sc.supplemental_groups, [2000, 5, 6]);
    // the groups of the pod's persistent volumes: after the pod's groups in a container, between
    // the fsGroup and the supplementalGroups in the sandbox, as upstream orders them
    let with_volumes = container(&p, first(&p), &root(), &NodeSecurity::default(), &[7, 8]);
    assert_eq!(
        with_volumes.unwrap().supplemental_groups,
        [2000, 5, 6, 7, 8]
    );
    assert_eq!(
        sandbox(&p, &[7, 8]).0.supplemental_groups,
        [2000, 7, 8, 5, 6]
    );
    let bare: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "prod", "uid": "u1"},
        "spec": {"containers": [{"name": "c"}]}}))
    .unwrap();
    let bare_sc = container(&bare, first(&bare), &root(), &NodeSecurity::default(), &[7]);
    assert_eq!(bare_sc.unwrap().supplemental_groups, [7]);
    assert!(
        sandbox(&bare, &[7]).0.supplemental_groups.is_empty(),
        "a sandbox without a pod securityContext gets no groups"
    );
    let merge = pod(json!({}), json!(null));
    assert_eq!(
        container_sc(&merge, &root()).supplemental_groups_policy,
        i32::from(SupplementalGroupsPolicy::Merge)
    );
}

#[test]
fn capabilities_privilege_read_only_root_and_no_new_privs_are_passed_on() {
    let p = pod(
        json!({}),
        json!({"capabilities": {"add": ["NET_ADMIN"], "drop": ["CHOWN", "KILL"]},
               "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false}),
    );
    let sc = container_sc(&p, &root());
    let caps = sc.capabilities.unwrap();
    assert_eq!(caps.add_capabilities, ["NET_ADMIN"]);
    assert_eq!(caps.drop_capabilities, ["CHOWN", "KILL"]);
    assert!(sc.readonly_rootfs);
    assert!(sc.no_new_privs);
    assert!(!sc.privileged);

    let escalating = pod(json!({}), json!({"allowPrivilegeEscalation": true}));
    assert!(!container_sc(&escalating, &root()).no_new_privs);
    let unset = pod(json!({}), json!(null));
    assert!(
        !container_sc(&unset, &root()).no_new_privs,
        "only an explicit false sets no_new_privs"
    );

    let privileged = pod(json!({}), json!({"privileged": true}));
    assert!(container_sc(&privileged, &root()).privileged);
    assert!(
        sandbox(&privileged, &[]).0.privileged,
        "a privileged container needs a privileged sandbox"
    );
    assert!(!sandbox(&unset, &[]).0.privileged);
}

#[test]
fn proc_mount_default_masks_the_runtimes_paths_and_unmasked_none() {
    let p = pod(json!({}), json!({"procMount": "Default"}));
    let sc = container_sc(&p, &root());
    assert!(sc.masked_paths.contains(&"/proc/kcore".to_string()));
    assert!(sc.readonly_paths.contains(&"/proc/sys".to_string()));
    let unset = pod(json!({}), json!(null));
    assert_eq!(
        container_sc(&unset, &root()).masked_paths.len(),
        DEFAULT_MASKED_PATHS.len()
    );
    let unmasked = pod(json!({}), json!({"procMount": "Unmasked"}));
    let sc = container_sc(&unmasked, &root());
    assert!(sc.masked_paths.is_empty() && sc.readonly_paths.is_empty());
}

#[test]
fn seccomp_is_the_containers_then_the_pods_else_unconfined() {
    let kind = |p: &Pod| {
        let s = container_sc(p, &root()).seccomp.unwrap();
        (
            ProfileType::try_from(s.profile_type).unwrap(),
            s.localhost_ref,
        )
    };
    let unset = pod(json!({}), json!(null));
    assert_eq!(kind(&unset), (ProfileType::Unconfined, String::new()));
    let pod_level = pod(
        json!({"seccompProfile": {"type": "RuntimeDefault"}}),
        json!(null),
    );
    assert_eq!(
        kind(&pod_level),
        (ProfileType::RuntimeDefault, String::new())
    );
    let container_level = pod(
        json!({"seccompProfile": {"type": "RuntimeDefault"}}),
        json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "prof/a.json"}}),
    );
    assert_eq!(
        kind(&container_level),
        (
            ProfileType::Localhost,
            "/var/lib/skiff/seccomp/prof/a.json".into()
        )
    );
    let unconfined = pod(
        json!({"seccompProfile": {"type": "RuntimeDefault"}}),
        json!({"seccompProfile": {"type": "Unconfined"}}),
    );
    assert_eq!(kind(&unconfined), (ProfileType::Unconfined, String::new()));
    let nameless = pod(
        json!({"seccompProfile": {"type": "Localhost"}}),
        json!(null),
    );
    assert_eq!(
        container(
            &nameless,
            first(&nameless),
            &root(),
            &NodeSecurity::default(),
            &[]
        )
        .unwrap_err(),
        "localhostProfile must be set if seccompProfile type is Localhost."
    );
    let mut annotated = pod(json!({}), json!(null));
    annotated.metadata.annotations = Some(
        [
            (
                "seccomp.security.alpha.kubernetes.io/pod".to_string(),
                "runtime/default".to_string(),
            ),
            (
                "container.seccomp.security.alpha.kubernetes.io/c".to_string(),
                "localhost/b.json".to_string(),
            ),
        ]
        .into(),
    );
    assert_eq!(
        kind(&annotated),
        (ProfileType::Unconfined, String::new()),
        "the deprecated annotations are non-functional"
    );
    let (sandbox_sc, _) = sandbox(&unset, &[]);
    assert_eq!(
        sandbox_sc.seccomp.unwrap().profile_type,
        i32::from(ProfileType::RuntimeDefault),
        "sandboxes run under the runtime's default profile"
    );
}

#[test]
fn seccomp_default_makes_an_unset_profile_runtime_default_and_leaves_set_ones_alone() {
    let node = NodeSecurity {
        seccomp_default: true,
        ..NodeSecurity::default()
    };
    let kind = |p: &Pod| {
        let s = container(p, first(p), &root(), &node, &[])
            .unwrap()
            .seccomp
            .unwrap();
        (
            ProfileType::try_from(s.profile_type).unwrap(),
            s.localhost_ref,
        )
    };
    let unset = pod(json!({}), json!(null));
    assert_eq!(kind(&unset), (ProfileType::RuntimeDefault, String::new()));
    let unconfined = pod(
        json!({"seccompProfile": {"type": "Unconfined"}}),
        json!(null),
    );
    assert_eq!(
        kind(&unconfined),
        (ProfileType::Unconfined, String::new()),
        "an explicit Unconfined stays unconfined"
    );
    let localhost = pod(
        json!({}),
        json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "a.json"}}),
    );
    assert_eq!(
        kind(&localhost),
        (
            ProfileType::Localhost,
            "/var/lib/skiff/seccomp/a.json".into()
        )
    );
}

#[test]
fn apparmor_comes_from_the_fields_then_the_deprecated_annotation() {
    let unconfined = pod(
        json!({"appArmorProfile": {"type": "Unconfined"}}),
        json!(null),
    );
    let sc = container_sc(&unconfined, &root());
    assert_eq!(
        sc.apparmor.unwrap().profile_type,
        i32::from(ProfileType::Unconfined)
    );
    let mut annotated = pod(json!({}), json!(null));
    annotated.metadata.annotations = Some(
        [(
            format!("{APPARMOR_ANNOTATION_PREFIX}c"),
            "localhost/k8s-deny".to_string(),
        )]
        .into(),
    );
    let p = apparmor_profile(&annotated, first(&annotated)).unwrap();
    assert_eq!(
        (p.type_.as_str(), p.localhost_profile.as_deref()),
        ("Localhost", Some("k8s-deny"))
    );
    assert!(
        container_sc(&pod(json!({}), json!(null)), &root())
            .apparmor
            .is_none()
    );
}

#[test]
fn host_namespaces_and_a_shared_process_namespace_are_namespace_options() {
    let mut p = pod(json!({}), json!(null));
    let ns = namespace_options(&p);
    assert_eq!(
        (ns.network, ns.pid, ns.ipc),
        (
            NamespaceMode::Pod as i32,
            NamespaceMode::Container as i32,
            NamespaceMode::Pod as i32
        )
    );
    p.spec.as_mut().unwrap().share_process_namespace = Some(true);
    assert_eq!(namespace_options(&p).pid, NamespaceMode::Pod as i32);
    let spec = p.spec.as_mut().unwrap();
    spec.host_pid = Some(true);
    spec.host_ipc = Some(true);
    spec.host_network = Some(true);
    let ns = container_sc(&p, &root()).namespace_options.unwrap();
    assert_eq!(
        (ns.network, ns.pid, ns.ipc),
        (
            NamespaceMode::Node as i32,
            NamespaceMode::Node as i32,
            NamespaceMode::Node as i32
        )
    );
}

#[test]
fn the_sandbox_runs_as_the_pods_user_with_its_sysctls() {
    let p = pod(
        json!({"runAsUser": 1000, "runAsGroup": 3000,
               "seLinuxOptions": {"level": "s0:c1"},
               "sysctls": [{"name": "net/ipv4/tcp_syncookies", "value": "0"}]}),
        json!(null),
    );
    let (sc, sysctls) = sandbox(&p, &[]);
    assert_eq!(sc.run_as_user, Some(Int64Value { value: 1000 }));
    assert_eq!(sc.run_as_group, Some(Int64Value { value: 3000 }));
    assert_eq!(sc.selinux_options.unwrap().level, "s0:c1");
    assert_eq!(sysctls["net.ipv4.tcp_syncookies"], "0");
}

#[test]
fn run_as_non_root_is_checked_against_the_user_with_upstreams_messages() {
    let who = r#"(pod: "web_prod(u1)", container: c)"#;
    let non_root = pod(json!({"runAsNonRoot": true}), json!(null));
    let check = |p: &Pod, image: ImageUser| verify_run_as_non_root(p, first(p), &image);
    assert_eq!(
        check(&non_root, root()).unwrap_err(),
        format!("container has runAsNonRoot and image will run as root {who}")
    );
    let named = ImageUser {
        uid: None,
        username: "nobody".into(),
    };
    assert_eq!(
        check(&non_root, named).unwrap_err(),
        format!(
            "container has runAsNonRoot and image has non-numeric user (nobody), cannot verify \
             user is non-root {who}"
        )
    );
    let numeric = ImageUser {
        uid: Some(1000),
        username: String::new(),
    };
    assert!(check(&non_root, numeric).is_ok());

    let root_user = pod(json!({"runAsNonRoot": true}), json!({"runAsUser": 0}));
    assert_eq!(
        check(&root_user, root()).unwrap_err(),
        format!("container's runAsUser breaks non-root policy {who}")
    );
    let explicit_user = pod(
        json!({"runAsNonRoot": true, "runAsUser": 1000}),
        json!(null),
    );
    assert!(check(&explicit_user, root()).is_ok());
    let overridden = pod(
        json!({"runAsNonRoot": true}),
        json!({"runAsNonRoot": false}),
    );
    assert!(check(&overridden, root()).is_ok());
}

#[test]
fn the_image_user_is_its_uid_else_its_name_else_root() {
    let mut image = Image {
        uid: Some(Int64Value { value: 1000 }),
        ..Default::default()
    };
    assert_eq!(ImageUser::of(Some(&image)).uid, Some(1000));
    image.uid = None;
    image.username = "nobody".into();
    assert_eq!(
        ImageUser::of(Some(&image)),
        ImageUser {
            uid: None,
            username: "nobody".into()
        }
    );
    image.username.clear();
    assert_eq!(ImageUser::of(Some(&image)).uid, Some(0));
}
