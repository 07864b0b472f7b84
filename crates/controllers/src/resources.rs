//! Discovery of every resource the API server serves, shared by the controllers that act on
//! all of them (garbage-collector, namespace): each resource at its group's preferred version,
//! with its scope and verbs.

use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope, verbs};

/// One served resource (never a subresource).
#[derive(Debug, Clone)]
pub struct Served {
    pub resource: ApiResource,
    pub namespaced: bool,
    pub verbs: Vec<String>,
}

impl Served {
    pub fn new(resource: ApiResource, caps: &ApiCapabilities) -> Served {
        Served {
            resource,
            namespaced: caps.scope == Scope::Namespaced,
            verbs: caps.operations.clone(),
        }
    }

    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    /// `plural.group`, as upstream names a resource in messages (`pods.` for the core group).
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.resource.plural, self.resource.group)
    }

    /// Whether it can be listed, watched and deleted (what the garbage collector needs).
    pub fn collectable(&self) -> bool {
        [verbs::LIST, verbs::WATCH, verbs::DELETE]
            .iter()
            .all(|v| self.supports(v))
    }
}

/// Every resource the server serves, at each group's preferred version; `all_versions` adds the
/// other versions too (for resolving the `apiVersion` of an ownerReference).
pub async fn discover(client: &kube::Client, all_versions: bool) -> kube::Result<Vec<Served>> {
    let discovery = Discovery::new(client.clone()).run().await?;
    let mut out = Vec::new();
    for group in discovery.groups() {
        if all_versions {
            for version in group.versions() {
                for (ar, caps) in group.versioned_resources(version) {
                    out.push(Served::new(ar, &caps));
                }
            }
        } else {
            for (ar, caps) in group.recommended_resources() {
                out.push(Served::new(ar, &caps));
            }
        }
    }
    Ok(out)
}
