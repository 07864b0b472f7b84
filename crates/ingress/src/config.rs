//! One configuration of the controller, built without I/O from the informers' objects: which
//! Ingresses it serves (their class), the routing [`Table`] with every backend resolved to the
//! ready endpoints of its Service port, the TLS [`Certs`] by host, and the problems worth a
//! Warning event (a TLS Secret that is missing or broken: that host is served with the default
//! certificate, the others as usual).
//!
//! An Ingress is served when its `spec.ingressClassName` (or the deprecated
//! `kubernetes.io/ingress.class` annotation) names an IngressClass whose `spec.controller` is
//! [`CONTROLLER`], or, when it names none, when such a class is the default
//! (`ingressclass.kubernetes.io/is-default-class: "true"`). Ingresses are applied oldest first,
//! so that of two conflicting rules (same host, path and type; two default backends; two
//! certificates for one host) the older Ingress's wins, as ingress-nginx decides.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Secret, Service, ServicePort};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressBackend, IngressClass};
use kube::ResourceExt;

use crate::route::{Backend, PathType, Table};
use crate::tls::{Certs, certified_key};

/// The `spec.controller` of the IngressClasses this controller serves.
pub const CONTROLLER: &str = "skiff.io/ingress-controller";
/// The IngressClass `skiff server` creates.
pub const CLASS: &str = "skiff";
/// Upstream's annotation marking the default IngressClass.
pub const DEFAULT_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";
/// The deprecated class annotation, still honoured by upstream controllers.
const CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";
/// The label linking an EndpointSlice to its Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The Service port `appProtocol` of endpoints that speak HTTP/2 without TLS (KEP-3726).
pub const H2C: &str = "kubernetes.io/h2c";

/// The reason of the Warning event about a TLS Secret that cannot be served.
pub const REASON_BAD_TLS: &str = "InvalidTLSSecret";

/// What the informers hold, as the build reads it.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub ingresses: Vec<Arc<Ingress>>,
    pub classes: Vec<Arc<IngressClass>>,
    pub services: Vec<Arc<Service>>,
    pub slices: Vec<Arc<EndpointSlice>>,
    pub secrets: Vec<Arc<Secret>>,
}

/// Something wrong with one served Ingress, for a Warning event on it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Problem {
    pub ingress: IngressRef,
    pub reason: &'static str,
    pub note: String,
}

/// A served Ingress: namespace, name and uid.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IngressRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// One configuration; swapped whole when anything changes.
#[derive(Debug, Default)]
pub struct Config {
    pub table: Table,
    pub certs: Certs,
    /// The Ingresses served, sorted.
    pub served: Vec<IngressRef>,
    pub problems: Vec<Problem>,
}

impl Config {
    /// Builds the configuration from `snapshot`.
    pub fn build(snapshot: &Snapshot) -> Config {
        let classes = Classes::new(&snapshot.classes);
        let mut ingresses: Vec<&Ingress> = snapshot
            .ingresses
            .iter()
            .map(AsRef::as_ref)
            .filter(|i| classes.serves(i))
            .collect();
        ingresses.sort_by_key(|i| {
            (
                i.metadata.creation_timestamp.as_ref().map(|t| t.0),
                i.namespace(),
                i.name_any(),
            )
        });
        let resolver = Resolve::new(snapshot);
        let secrets: HashMap<(String, String), &Secret> = snapshot
            .secrets
            .iter()
            .map(|s| {
                (
                    (s.namespace().unwrap_or_default(), s.name_any()),
                    s.as_ref(),
                )
            })
            .collect();
        let mut config = Config::default();
        for ingress in ingresses {
            let namespace = ingress.namespace().unwrap_or_default();
            let reference = IngressRef {
                namespace: namespace.clone(),
                name: ingress.name_any(),
                uid: ingress.uid().unwrap_or_default(),
            };
            let Some(spec) = &ingress.spec else {
                config.served.push(reference);
                continue;
            };
            if let Some(default) = &spec.default_backend {
                config
                    .table
                    .set_default(resolver.backend(&namespace, default));
            }
            let rules = spec.rules.as_deref().unwrap_or_default();
            for rule in rules {
                let host = rule.host.as_deref().unwrap_or_default();
                let paths = rule.http.as_ref().map(|h| h.paths.as_slice());
                for path in paths.unwrap_or_default() {
                    let kind = match path.path_type.as_str() {
                        "Exact" => PathType::Exact,
                        // ImplementationSpecific: served as Prefix
                        _ => PathType::Prefix,
                    };
                    let backend = resolver.backend(&namespace, &path.backend);
                    let at = path.path.as_deref().unwrap_or("/");
                    config.table.add(host, at, kind, backend);
                }
            }
            for tls in spec.tls.as_deref().unwrap_or_default() {
                let Some(secret_name) = tls.secret_name.as_deref().filter(|s| !s.is_empty()) else {
                    continue;
                };
                let hosts: Vec<&str> = match tls.hosts.as_deref() {
                    Some(hosts) if !hosts.is_empty() => hosts.iter().map(String::as_str).collect(),
                    // no hosts: the certificate is for the Ingress's own rules' hosts
                    _ => rules.iter().filter_map(|r| r.host.as_deref()).collect(),
                };
                let key = (namespace.clone(), secret_name.to_string());
                let certified = match secrets.get(&key) {
                    None => Err(format!(
                        "no kubernetes.io/tls secret {namespace}/{secret_name}"
                    )),
                    Some(secret) => certified_key(secret).map_err(|why| {
                        format!(
                            "secret {namespace}/{secret_name} is not a valid TLS certificate: {why}"
                        )
                    }),
                };
                match certified {
                    Ok(key) => hosts.iter().for_each(|h| config.certs.add(h, key.clone())),
                    Err(note) => config.problems.push(Problem {
                        ingress: reference.clone(),
                        reason: REASON_BAD_TLS,
                        note: format!(
                            "{note}; hosts {} are served with the default certificate",
                            hosts.join(", ")
                        ),
                    }),
                }
            }
            config.served.push(reference);
        }
        config.served.sort();
        config
    }
}

/// The IngressClasses of this controller.
struct Classes {
    names: BTreeSet<String>,
    default: bool,
}

impl Classes {
    fn new(classes: &[Arc<IngressClass>]) -> Classes {
        let ours: Vec<&IngressClass> = classes
            .iter()
            .map(AsRef::as_ref)
            .filter(|c| {
                c.spec
                    .as_ref()
                    .and_then(|s| s.controller.as_deref())
                    .is_some_and(|c| c == CONTROLLER)
            })
            .collect();
        Classes {
            names: ours.iter().map(|c| c.name_any()).collect(),
            default: ours.iter().any(|c| {
                c.annotations()
                    .get(DEFAULT_CLASS_ANNOTATION)
                    .is_some_and(|v| v == "true")
            }),
        }
    }

    fn serves(&self, ingress: &Ingress) -> bool {
        let named = ingress
            .spec
            .as_ref()
            .and_then(|s| s.ingress_class_name.as_ref())
            .or_else(|| ingress.annotations().get(CLASS_ANNOTATION));
        match named {
            Some(name) => self.names.contains(name),
            None => self.default,
        }
    }
}

/// Service backends resolved to endpoints.
struct Resolve<'a> {
    services: HashMap<(&'a str, &'a str), &'a Service>,
    /// By namespace and Service name.
    slices: HashMap<(&'a str, &'a str), Vec<&'a EndpointSlice>>,
}

impl<'a> Resolve<'a> {
    fn new(snapshot: &'a Snapshot) -> Resolve<'a> {
        let services = snapshot
            .services
            .iter()
            .filter_map(|s| {
                let ns = s.metadata.namespace.as_deref()?;
                Some(((ns, s.metadata.name.as_deref()?), s.as_ref()))
            })
            .collect();
        let mut slices: HashMap<_, Vec<_>> = HashMap::new();
        for slice in &snapshot.slices {
            let ns = slice.metadata.namespace.as_deref();
            let service = slice.labels().get(SERVICE_NAME_LABEL);
            if let (Some(ns), Some(service)) = (ns, service) {
                slices
                    .entry((ns, service.as_str()))
                    .or_default()
                    .push(slice.as_ref());
            }
        }
        Resolve { services, slices }
    }

    /// The backend `backend` of an Ingress in `namespace`: its Service port's ready endpoints,
    /// or why it cannot serve.
    fn backend(&self, namespace: &str, backend: &IngressBackend) -> Arc<Backend> {
        let Some(service) = &backend.service else {
            let name = backend
                .resource
                .as_ref()
                .map_or_else(String::new, |r| format!("{}/{}", r.kind, r.name));
            return Arc::new(Backend::unavailable(
                name.clone(),
                format!("resource backend {name} is not supported"),
            ));
        };
        let port = service.port.as_ref();
        let number = port.and_then(|p| p.number);
        let port_name = port.and_then(|p| p.name.clone());
        let label = match (&port_name, number) {
            (Some(n), _) => n.clone(),
            (None, Some(n)) => n.to_string(),
            (None, None) => String::new(),
        };
        let name = format!("{namespace}/{}:{label}", service.name);
        let Some(svc) = self.services.get(&(namespace, service.name.as_str())) else {
            let why = format!("service {namespace}/{} not found", service.name);
            return Arc::new(Backend::unavailable(name, why));
        };
        let ports = svc.spec.as_ref().and_then(|s| s.ports.as_deref());
        let found =
            ports
                .unwrap_or_default()
                .iter()
                .find(|p: &&ServicePort| match (&port_name, number) {
                    (Some(n), _) => p.name.as_ref() == Some(n),
                    (None, Some(n)) => p.port == n,
                    (None, None) => false,
                });
        let Some(svc_port) = found else {
            let why = format!("service {namespace}/{} has no port {label}", service.name);
            return Arc::new(Backend::unavailable(name, why));
        };
        let wanted = svc_port.name.as_deref().unwrap_or_default();
        let mut endpoints = Vec::new();
        let slices = self.slices.get(&(namespace, service.name.as_str()));
        for slice in slices.into_iter().flatten() {
            let slice_port = slice.ports.as_deref().unwrap_or_default().iter().find(|p| {
                p.name.as_deref().unwrap_or_default() == wanted
                    && p.protocol.as_deref().unwrap_or("TCP") == "TCP"
            });
            let Some(port) = slice_port.and_then(|p| p.port) else {
                continue;
            };
            let Ok(port) = u16::try_from(port) else {
                continue;
            };
            for endpoint in &slice.endpoints {
                let ready = endpoint.conditions.as_ref().and_then(|c| c.ready);
                if ready == Some(false) {
                    continue;
                }
                for address in &endpoint.addresses {
                    if let Ok(ip) = address.parse::<IpAddr>() {
                        endpoints.push(SocketAddr::new(ip, port));
                    }
                }
            }
        }
        endpoints.sort_unstable();
        endpoints.dedup();
        let h2c = svc_port.app_protocol.as_deref() == Some(H2C);
        Arc::new(Backend::new(name, endpoints).with_h2c(h2c))
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
