//! `ImageLocality`: prefers nodes that already hold the pod's container images, by size,
//! scaled down for images spread over many nodes (so pods do not heap onto the few nodes that
//! pulled first). PreScore counts, once per cycle, how many nodes hold each wanted image.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use super::helper::pod_spec;
use crate::framework::{
    CycleState, MAX_NODE_SCORE, NodeInfo, Plugin, PodInfo, PreScorePlugin, ScorePlugin, Snapshot,
    Status,
};

pub const NAME: &str = "ImageLocality";

const MB: i64 = 1024 * 1024;
/// Below this the sum counts as nothing (upstream's `minThreshold`, 23 MiB).
const MIN_THRESHOLD: i64 = 23 * MB;
/// Per container, above this the sum counts as full (upstream's `maxContainerThreshold`).
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

const PRE_SCORE_KEY: &str = "PreScoreImageLocality";

/// One container's image: the names a node may list it under, and how many nodes do.
#[derive(Clone)]
struct Wanted {
    names: [String; 2],
    num_nodes: usize,
}

#[derive(Clone)]
struct PreScoreState {
    wanted: Vec<Wanted>,
    total_nodes: usize,
    containers: usize,
}

/// Upstream's `normalizedImageName`: `:latest` added when there is no tag.
pub fn with_default_tag(name: &str) -> String {
    if name.rfind(':') <= name.rfind('/') && !name.contains('@') {
        format!("{name}:latest")
    } else {
        name.to_string()
    }
}

/// The fully qualified name a CRI runtime reports (`busybox` →
/// `docker.io/library/busybox:latest`, `me/app:1` → `docker.io/me/app:1`).
pub fn fully_qualified(name: &str) -> String {
    let tagged = with_default_tag(name);
    match tagged.split_once('/') {
        None => format!("docker.io/library/{tagged}"),
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => tagged,
        Some(_) => format!("docker.io/{tagged}"),
    }
}

/// The size of the image a node lists under any of `names`.
fn size_on(node: &Node, names: &[String; 2]) -> Option<i64> {
    let images = node.status.as_ref()?.images.as_ref()?;
    images
        .iter()
        .find(|img| img.names.iter().flatten().any(|n| names.contains(n)))
        .map(|img| img.size_bytes.unwrap_or(0))
}

pub struct ImageLocality;

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreScorePlugin for ImageLocality {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        let spec = pod_spec(&pod.pod);
        let containers = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers);
        let mut wanted: Vec<Wanted> = containers
            .map(|c| {
                let image = c.image.as_deref().unwrap_or("");
                Wanted {
                    names: [with_default_tag(image), fully_qualified(image)],
                    num_nodes: 0,
                }
            })
            .collect();
        let count = wanted.len();
        for w in wanted.iter_mut() {
            // nodes report one of the two forms; one reporting both would count twice
            let holders: usize = w.names.iter().map(|n| snapshot.nodes_with_image(n)).sum();
            w.num_nodes = holders.min(snapshot.len());
        }
        wanted.retain(|w| w.num_nodes > 0);
        state.write(
            PRE_SCORE_KEY,
            PreScoreState {
                wanted,
                total_nodes: snapshot.len(),
                containers: count,
            },
        );
        Status::success()
    }
}

impl ScorePlugin for ImageLocality {
    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) else {
            return Err(Status::error(format!(
                "reading {PRE_SCORE_KEY:?} from cycleState: not found"
            )));
        };
        let mut sum = 0i64;
        for w in &s.wanted {
            if let Some(size) = size_on(&node.node, &w.names) {
                let spread = w.num_nodes as f64 / s.total_nodes as f64;
                sum += (size as f64 * spread) as i64;
            }
        }
        Ok(priority(sum, s.containers))
    }
}

/// Upstream's `calculatePriority`: the sum clamped to the thresholds, scaled onto 0..=100.
fn priority(sum: i64, containers: usize) -> i64 {
    let max = MAX_CONTAINER_THRESHOLD * containers as i64;
    if max <= MIN_THRESHOLD {
        return 0;
    }
    let sum = sum.clamp(MIN_THRESHOLD, max);
    MAX_NODE_SCORE * (sum - MIN_THRESHOLD) / (max - MIN_THRESHOLD)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::{PodBuilder, node, snapshot};

    #[test]
    fn image_names_are_normalized_as_runtimes_report_them() {
        let cases = [
            (
                "busybox",
                "busybox:latest",
                "docker.io/library/busybox:latest",
            ),
            (
                "busybox:1.36",
                "busybox:1.36",
                "docker.io/library/busybox:1.36",
            ),
            ("me/app", "me/app:latest", "docker.io/me/app:latest"),
            ("gcr.io/x/y:2", "gcr.io/x/y:2", "gcr.io/x/y:2"),
            (
                "localhost:5000/y",
                "localhost:5000/y:latest",
                "localhost:5000/y:latest",
            ),
            (
                "app@sha256:abc",
                "app@sha256:abc",
                "docker.io/library/app@sha256:abc",
            ),
        ];
        for (name, tagged, full) in cases {
            assert_eq!(with_default_tag(name), tagged, "{name}");
            assert_eq!(fully_qualified(name), full, "{name}");
        }
    }

    #[test]
    fn nodes_holding_big_images_score_higher_scaled_by_spread() {
        let big = 500 * MB;
        let snap = snapshot(vec![
            node("has-both")
                .image("docker.io/library/app:latest", big)
                .image("docker.io/library/side:latest", 300 * MB)
                .info(&[]),
            node("has-app").image("app:latest", big).info(&[]),
            node("small")
                .image("docker.io/library/side:latest", 10 * MB)
                .info(&[]),
            node("none").info(&[]),
        ]);
        let pod = PodBuilder::new("p")
            .image("app")
            .with_spec(|s| {
                let mut c = s.containers[0].clone();
                c.name = "side".into();
                c.image = Some("side".into());
                s.containers.push(c);
            })
            .info();
        let mut state = CycleState::default();
        assert!(
            ImageLocality
                .pre_score(&mut state, &pod, snap.nodes(), &snap)
                .is_success()
        );
        let got: Vec<i64> = snap
            .nodes()
            .iter()
            .map(|n| ImageLocality.score(&state, &pod, n).unwrap())
            .collect();
        // app on 2/4 nodes: 250 MiB; side on 2/4: 150 MiB or 5 MiB; max 2000 MiB
        // has-both: (400-23)*100/(2000-23) = 19; has-app: (250-23)*100/1977 = 11
        assert_eq!(got, [19, 11, 0, 0]);
    }
}
