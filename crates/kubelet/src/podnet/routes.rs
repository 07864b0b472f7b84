//! The main route table as the pod network keeps it: Skiff's routes (those with
//! [`ROUTE_PROTOCOL`]) against the wanted ones, whichever backend wants them. A route is
//! replaced when it is missing or points elsewhere, deleted when no peer wants it any more
//! (also one the other backend made before a restart), and a pod CIDR that a route of someone
//! else's already covers is left alone.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::Ipv4Addr;

use serde::Deserialize;

use super::{Ipv4Net, ROUTE_PROTOCOL, Result, json};
use crate::podnet_runner::{Cmd, Runner};

/// A route to a peer's pod CIDR: via a gateway, and for the VXLAN backend through a given
/// device with `onlink` (the gateway, the peer's VTEP address, is on no network of the
/// device).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub via: Ipv4Addr,
    pub onlink_dev: Option<String>,
}

impl Route {
    /// Via a gateway on a directly attached network (host-gw).
    pub fn via(gateway: Ipv4Addr) -> Route {
        Route {
            via: gateway,
            onlink_dev: None,
        }
    }

    /// Via a gateway reached through `dev` whatever its address (vxlan).
    pub fn onlink(gateway: Ipv4Addr, dev: &str) -> Route {
        Route {
            via: gateway,
            onlink_dev: Some(dev.into()),
        }
    }

    /// Whether the installed route `have` is this one.
    fn is(&self, have: &RouteJson) -> bool {
        let via = have.gateway.as_deref().and_then(|g| g.parse().ok()) == Some(self.via);
        via && match &self.onlink_dev {
            None => true,
            Some(dev) => have.dev.as_ref() == Some(dev) && have.flags.iter().any(|f| f == "onlink"),
        }
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "via {}", self.via)?;
        if let Some(dev) = &self.onlink_dev {
            write!(f, " dev {dev} onlink")?;
        }
        Ok(())
    }
}

/// A route as `ip -j route show` lists it.
#[derive(Debug, Deserialize)]
struct RouteJson {
    dst: String,
    gateway: Option<String>,
    dev: Option<String>,
    #[serde(default)]
    flags: Vec<String>,
}

/// What one route sync changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RouteChanges {
    /// Routes added or pointed elsewhere.
    pub replaced: Vec<(Ipv4Net, Route)>,
    /// Skiff's routes to pod CIDRs no Node (reachable from here) has any more.
    pub deleted: Vec<Ipv4Net>,
    /// Pod CIDRs another route (not Skiff's) already claims: left alone.
    pub conflicting: Vec<Ipv4Net>,
}

/// Deletes Skiff's routes that are not `wanted`, then adds or re-points the wanted ones,
/// skipping the pod CIDRs another route claims.
pub async fn sync(runner: &dyn Runner, wanted: &BTreeMap<Ipv4Net, Route>) -> Result<RouteChanges> {
    let ours = main_routes(runner, Some(ROUTE_PROTOCOL)).await?;
    let others: BTreeSet<Ipv4Net> = main_routes(runner, None)
        .await?
        .into_keys()
        .filter(|dst| !ours.contains_key(dst))
        .collect();
    let mut changes = RouteChanges::default();
    for dst in ours.keys().filter(|dst| !wanted.contains_key(dst)) {
        let dst_text = dst.to_string();
        runner
            .run(&Cmd::new(
                "ip",
                &["route", "del", &dst_text, "proto", ROUTE_PROTOCOL],
            ))
            .await?;
        changes.deleted.push(*dst);
    }
    for (dst, route) in wanted {
        if ours.get(dst).is_some_and(|have| route.is(have)) {
            continue;
        }
        if others.contains(dst) {
            changes.conflicting.push(*dst);
            continue;
        }
        let (dst_text, via) = (dst.to_string(), route.via.to_string());
        let mut args = vec!["route", "replace", &dst_text, "via", &via];
        if let Some(dev) = &route.onlink_dev {
            args.extend(["dev", dev, "onlink"]);
        }
        args.extend(["proto", ROUTE_PROTOCOL]);
        runner.run(&Cmd::new("ip", &args)).await?;
        changes.replaced.push((*dst, route.clone()));
    }
    Ok(changes)
}

/// The main table's IPv4 routes (only those with `protocol`, if given), by destination.
async fn main_routes(
    runner: &dyn Runner,
    protocol: Option<&str>,
) -> Result<BTreeMap<Ipv4Net, RouteJson>> {
    let mut args = vec!["-j", "-4", "route", "show", "table", "main"];
    if let Some(p) = protocol {
        args.extend(["proto", p]);
    }
    let routes: Vec<RouteJson> = json(runner, &Cmd::new("ip", &args)).await?;
    Ok(routes
        .into_iter()
        .filter_map(|r| Some((Ipv4Net::parse(&r.dst)?, r)))
        .collect())
}
