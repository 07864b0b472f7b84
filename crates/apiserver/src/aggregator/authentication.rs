//! `kube-system/extension-apiserver-authentication`, the ConfigMap aggregated API servers read
//! to trust this one (upstream's ClusterAuthenticationTrustController): the CA of client
//! certificates, and the front-proxy CA with the allowed proxy name and the headers that carry
//! the user. Kept as this server's configuration says, written again when it differs.

use std::sync::Arc;

use serde_json::{Value, json};

use super::Options;
use super::proxy::{REMOTE_EXTRA_PREFIX, REMOTE_GROUP, REMOTE_USER};
use crate::error::Result;
use crate::handlers::Ctx;
use crate::pki::FRONT_PROXY_CLIENT;
use crate::registry::{self, Fields};
use crate::request::RequestInfo;
use crate::server::ApiServer;

pub const NAMESPACE: &str = "kube-system";
pub const NAME: &str = "extension-apiserver-authentication";

/// The ConfigMap's data for `options` (lists as JSON arrays, as upstream writes them).
pub fn data(options: &Options) -> Value {
    let list = |s: &str| serde_json::to_string(&[s]).expect("a list of strings");
    json!({
        "client-ca-file": options.client_ca_pem,
        "requestheader-client-ca-file": options.front_proxy.ca_cert_pem,
        "requestheader-allowed-names": list(FRONT_PROXY_CLIENT),
        "requestheader-username-headers": list(REMOTE_USER),
        "requestheader-group-headers": list(REMOTE_GROUP),
        "requestheader-extra-headers-prefix": list(REMOTE_EXTRA_PREFIX),
    })
}

fn ctx(server: &Arc<ApiServer>, verb: &str) -> Ctx {
    let rt = server
        .registry
        .lookup("", "v1", "configmaps")
        .expect("ConfigMaps are built in");
    let info = RequestInfo::resource_request(verb, "", "configmaps", NAMESPACE, NAME);
    Ctx::internal(server.clone(), rt, info)
}

/// Creates the ConfigMap, or writes its data again when it differs from `options`'.
pub async fn ensure(server: &Arc<ApiServer>, options: &Options) -> Result<()> {
    let want = data(options);
    let rt = ctx(server, "get").rt.clone();
    let current = server
        .cache
        .resource(&rt)
        .get(&format!("{NAMESPACE}/{NAME}"))
        .map(|c| c.object())
        .transpose()?;
    match current {
        Some(cm) if cm["data"] == want => Ok(()),
        Some(_) => {
            registry::update(&ctx(server, "update"), None, Fields::Record, |cm| {
                let mut next = cm.clone();
                next["data"] = want.clone();
                Ok(next)
            })
            .await?;
            Ok(())
        }
        None => {
            let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": NAME, "namespace": NAMESPACE},
                            "data": want});
            match registry::create(&ctx(server, "create"), cm, Fields::Record).await {
                // created a moment ago, before the cache saw it: the next pass compares
                Err(e) if e.code == 409 => Ok(()),
                other => other.map(|_| ()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_names_both_cas_the_proxy_and_the_headers() {
        let options = Options {
            client_ca_pem: "CLIENT CA".into(),
            front_proxy: crate::pki::FrontProxy {
                ca_cert_pem: "PROXY CA".into(),
                client_cert_pem: String::new(),
                client_key_pem: String::new(),
            },
            recheck: super::super::DEFAULT_RECHECK,
        };
        assert_eq!(
            data(&options),
            json!({
                "client-ca-file": "CLIENT CA",
                "requestheader-client-ca-file": "PROXY CA",
                "requestheader-allowed-names": "[\"front-proxy-client\"]",
                "requestheader-username-headers": "[\"X-Remote-User\"]",
                "requestheader-group-headers": "[\"X-Remote-Group\"]",
                "requestheader-extra-headers-prefix": "[\"X-Remote-Extra-\"]",
            })
        );
    }
}
