//! Image garbage collection, as upstream's image GC manager (`pkg/kubelet/images`): every
//! [`IMAGE_GC_PERIOD`] the runtime's images are listed and each is remembered with when it was
//! first detected and last seen used by a container (running or not); images unused for
//! `imageMaximumGCAge` are removed whatever the disk usage, and when the image filesystem's
//! usage is at or above `imageGCHighThresholdPercent` unused images are removed, least recently
//! used first, until enough is freed to bring it down to `imageGCLowThresholdPercent`. An image
//! younger than `imageMinimumGCAge`, one a container uses, one the runtime pins, and the
//! sandbox and built-in images (which no registry could bring back here) are never removed.
//!
//! The eviction manager frees disk through [`ImageGcManager::delete_unused_images`]
//! (upstream's `DeleteUnusedImages`).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use crate::api::{PodApi, PodEvent};
use crate::cri::{self, ContainerRuntime, Image};
use crate::fs_stats::FsStats;
use crate::kubelet_config::KubeletConfiguration;

/// How often images are garbage collected (upstream's `ImageGCPeriod`).
pub const IMAGE_GC_PERIOD: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{step}: {source}")]
    Runtime {
        step: &'static str,
        #[source]
        source: cri::Error,
    },
    #[error("the runtime reports no image filesystem")]
    NoImageFs,
    #[error("image filesystem {mountpoint}: {source}")]
    FsStats {
        mountpoint: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Upstream's text, which its `InvalidDiskCapacity` event carries.
    #[error("invalid capacity 0 on image filesystem")]
    InvalidCapacity,
    /// Upstream's text (capitalized, with a period), which its `FreeDiskSpaceFailed` and
    /// `ImageGCFailed` events carry.
    #[error(
        "Failed to garbage collect required amount of images. Attempted to free {wanted} bytes, but only found {freed} bytes eligible to free."
    )]
    NotEnoughFreed { wanted: u64, freed: u64 },
    #[error(
        "wanted to free {wanted} bytes, but freed {freed} bytes space with errors in image deletion: {errors}"
    )]
    Removal {
        wanted: u64,
        freed: u64,
        errors: String,
    },
    #[error(
        "wanted to free images older than {max_age:?}, encountered errors in image deletion: {errors}"
    )]
    OldRemoval { max_age: Duration, errors: String },
}

impl Error {
    /// A failed runtime call, with the step it was for.
    fn runtime(step: &'static str) -> impl FnOnce(cri::Error) -> Error {
        move |source| Error::Runtime { step, source }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// When images are removed (upstream's `ImageGCPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageGcPolicy {
    /// At or above this usage of the image filesystem (percent), unused images are removed…
    pub high_threshold_percent: i32,
    /// …until usage is down to this one.
    pub low_threshold_percent: i32,
    /// An image first detected less than this long ago is kept.
    pub min_age: Duration,
    /// An image unused for this long is removed whatever the usage; zero: never.
    pub max_age: Duration,
}

impl ImageGcPolicy {
    pub fn from_config(c: &KubeletConfiguration) -> ImageGcPolicy {
        ImageGcPolicy {
            high_threshold_percent: c.image_gc_high_threshold_percent,
            low_threshold_percent: c.image_gc_low_threshold_percent,
            min_age: c.image_minimum_gc_age,
            max_age: c.image_maximum_gc_age,
        }
    }

    /// Upstream turns image garbage collection off when the high threshold is 100 and there
    /// is no maximum age.
    pub fn disabled(&self) -> bool {
        self.high_threshold_percent >= 100 && self.max_age.is_zero()
    }
}

/// The image filesystem: where the runtime keeps its images, the bytes they use there (CRI
/// `ImageFsInfo`), and the filesystem's figures (`statvfs` on its mountpoint), as upstream's
/// CRI stats provider puts them together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFsStats {
    pub mountpoint: PathBuf,
    /// What the images use, by the runtime's count.
    pub images_bytes: u64,
    pub fs: FsStats,
}

/// How a filesystem's figures are read (`crate::fs_stats::fs_stats` on a real node).
pub type FsStatsFn = Arc<dyn Fn(&Path) -> std::io::Result<FsStats> + Send + Sync>;

/// The image filesystem's figures: its mountpoint and images' bytes from the runtime, its
/// capacity and free space from `fs`.
pub async fn image_fs_stats(
    runtime: &dyn ContainerRuntime,
    fs: &FsStatsFn,
) -> Result<ImageFsStats> {
    let filesystems = runtime
        .image_fs_info()
        .await
        .map_err(Error::runtime("reading the image filesystem"))?;
    let usage = filesystems.into_iter().next().ok_or(Error::NoImageFs)?;
    let mountpoint = PathBuf::from(usage.fs_id.map(|f| f.mountpoint).unwrap_or_default());
    let stats = fs(&mountpoint).map_err(|source| Error::FsStats {
        mountpoint: mountpoint.clone(),
        source,
    })?;
    Ok(ImageFsStats {
        mountpoint,
        images_bytes: usage.used_bytes.map_or(0, |u| u.value),
        fs: stats,
    })
}

/// What is known of one image (upstream's `imageRecord`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    first_detected: Timestamp,
    /// When a container was last seen using it; `None`: never, which sorts as the oldest.
    last_used: Option<Timestamp>,
    size: u64,
    /// Pinned by the runtime, or one of the images never to remove.
    kept: bool,
}

/// An image that may be removed, with its record.
#[derive(Debug, Clone)]
struct Candidate {
    id: String,
    record: Record,
}

/// Image garbage collection for one node; shared (`Arc`) by its loop and the eviction manager.
pub struct ImageGcManager {
    runtime: Arc<dyn ContainerRuntime>,
    /// Where the node's events go (`FreeDiskSpaceFailed`, `InvalidDiskCapacity`,
    /// `ImageGCFailed`).
    api: Arc<dyn PodApi>,
    policy: ImageGcPolicy,
    /// Image names never removed: the sandbox image and the built-in images.
    keep: Vec<String>,
    fs: FsStatsFn,
    clock: Arc<dyn Fn() -> Timestamp + Send + Sync>,
    /// Image id → its record. Held for a whole collection (and a whole
    /// [`ImageGcManager::delete_unused_images`]), so that the two never remove at once.
    records: tokio::sync::Mutex<HashMap<String, Record>>,
}

fn age(now: Timestamp, since: Timestamp) -> Duration {
    let nanos = now.as_nanosecond() - since.as_nanosecond();
    Duration::from_nanos(u64::try_from(nanos.max(0)).unwrap_or(u64::MAX))
}

impl ImageGcManager {
    pub fn new(
        runtime: Arc<dyn ContainerRuntime>,
        api: Arc<dyn PodApi>,
        policy: ImageGcPolicy,
        keep: Vec<String>,
        fs: FsStatsFn,
        clock: Arc<dyn Fn() -> Timestamp + Send + Sync>,
    ) -> ImageGcManager {
        ImageGcManager {
            runtime,
            api,
            policy,
            keep,
            fs,
            clock,
            records: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Collects every `period` (the first time at once) until the task is dropped, with
    /// upstream's events: `ImageGCFailed` on the Node when a collection fails twice in a row
    /// (the first failure may be stats not being ready yet). Does nothing when the policy
    /// disables collection.
    pub async fn run(self: Arc<Self>, period: Duration) {
        if self.policy.disabled() {
            tracing::info!(
                "imageGCHighThresholdPercent is 100 and imageMaximumGCAge is 0: image garbage collection is off"
            );
            return;
        }
        let began = (self.clock)();
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failed_before = false;
        loop {
            tick.tick().await;
            match self.garbage_collect(began).await {
                Ok(()) => {
                    if failed_before {
                        tracing::info!("image garbage collection succeeded");
                    }
                    failed_before = false;
                }
                Err(e) if failed_before => {
                    tracing::error!(error = %e, "image garbage collection failed multiple times in a row");
                    let event = PodEvent::pod_warning("ImageGCFailed", e.to_string());
                    self.api.node_event(event).await;
                }
                Err(e) => {
                    failed_before = true;
                    tracing::error!(error = %e, "image garbage collection failed once");
                }
            }
        }
    }

    /// One collection (upstream's `GarbageCollect`): images unused for the maximum age go
    /// (once the kubelet has run that long, counted from `began`), then, if the image
    /// filesystem is at or above the high threshold, unused images least recently used first
    /// until the low threshold would be reached. Not freeing enough is an error, with a
    /// `FreeDiskSpaceFailed` event on the Node.
    pub async fn garbage_collect(&self, began: Timestamp) -> Result<()> {
        let now = (self.clock)();
        let mut records = self.records.lock().await;
        let candidates = self.candidates(&mut records, now).await?;
        let candidates = self
            .free_old_images(&mut records, candidates, now, began)
            .await?;

        let stats = image_fs_stats(self.runtime.as_ref(), &self.fs).await?;
        let capacity = stats.fs.capacity_bytes;
        let available = stats.fs.available_bytes.min(capacity);
        if capacity == 0 {
            let e = Error::InvalidCapacity;
            let event = PodEvent::pod_warning("InvalidDiskCapacity", e.to_string());
            self.api.node_event(event).await;
            return Err(e);
        }
        let usage_percent = 100 - (u128::from(available) * 100 / u128::from(capacity)) as i32;
        if usage_percent < self.policy.high_threshold_percent {
            return Ok(());
        }
        let low = u128::from((100 - self.policy.low_threshold_percent).max(0) as u32);
        let wanted = (u128::from(capacity) * low / 100).saturating_sub(u128::from(available));
        let wanted = u64::try_from(wanted).unwrap_or(u64::MAX);
        tracing::info!(
            usage = usage_percent,
            high_threshold = self.policy.high_threshold_percent,
            amount_to_free = wanted,
            low_threshold = self.policy.low_threshold_percent,
            "disk usage on the image filesystem is over the high threshold, trying to free bytes down to the low threshold"
        );
        let freed = self
            .free_space(&mut records, wanted, now, candidates)
            .await?;
        if freed < wanted {
            let e = Error::NotEnoughFreed { wanted, freed };
            let event = PodEvent::pod_warning("FreeDiskSpaceFailed", e.to_string());
            self.api.node_event(event).await;
            return Err(e);
        }
        Ok(())
    }

    /// Removes every image that may be removed (unused, not kept, older than the minimum
    /// age), least recently used first, and returns the bytes freed: for the eviction manager
    /// under disk pressure (upstream's `DeleteUnusedImages`). An error after some removals
    /// still removed them.
    pub async fn delete_unused_images(&self) -> Result<u64> {
        tracing::info!("attempting to delete unused images");
        let now = (self.clock)();
        let mut records = self.records.lock().await;
        let candidates = self.candidates(&mut records, now).await?;
        self.free_space(&mut records, u64::MAX, now, candidates)
            .await
    }

    /// Refreshes the records from the runtime (upstream's `detectImages`): new images are
    /// first detected now, images some container uses were last used now, images gone are
    /// forgotten. Returns the removable ones in eviction order: least recently used first,
    /// ties broken by first detection.
    async fn candidates(
        &self,
        records: &mut HashMap<String, Record>,
        now: Timestamp,
    ) -> Result<Vec<Candidate>> {
        let images = self
            .runtime
            .list_images()
            .await
            .map_err(Error::runtime("listing images"))?;
        let containers = self
            .runtime
            .list_containers(HashMap::new())
            .await
            .map_err(Error::runtime("listing containers"))?;
        // a container names its image by id (`image_ref`) and as it was asked for
        let used_refs: HashSet<&str> = containers
            .iter()
            .flat_map(|c| {
                let spec = c.image.as_ref().map(|i| i.image.as_str());
                std::iter::once(c.image_ref.as_str()).chain(spec)
            })
            .filter(|r| !r.is_empty())
            .collect();
        let mut in_use = HashSet::new();
        let mut present = HashSet::new();
        for image in &images {
            present.insert(image.id.clone());
            let used = names(image).any(|n| used_refs.contains(n));
            let kept = image.pinned || names(image).any(|n| self.keep.iter().any(|k| k == n));
            let record = records.entry(image.id.clone()).or_insert(Record {
                first_detected: now,
                last_used: None,
                size: 0,
                kept,
            });
            if used {
                record.last_used = Some(now);
                in_use.insert(image.id.clone());
            }
            record.size = image.size;
            record.kept = kept;
        }
        records.retain(|id, _| present.contains(id));
        let mut candidates: Vec<Candidate> = records
            .iter()
            .filter(|(id, r)| !in_use.contains(*id) && !r.kept)
            .map(|(id, r)| Candidate {
                id: id.clone(),
                record: r.clone(),
            })
            .collect();
        candidates.sort_by(|a, b| {
            (a.record.last_used, a.record.first_detected, &a.id).cmp(&(
                b.record.last_used,
                b.record.first_detected,
                &b.id,
            ))
        });
        Ok(candidates)
    }

    /// Removes the candidates unused for longer than the maximum age, once the kubelet has
    /// collected for that long (before, its records cannot tell); returns the others.
    async fn free_old_images(
        &self,
        records: &mut HashMap<String, Record>,
        candidates: Vec<Candidate>,
        now: Timestamp,
        began: Timestamp,
    ) -> Result<Vec<Candidate>> {
        let max_age = self.policy.max_age;
        if max_age.is_zero() || age(now, began) <= max_age {
            return Ok(candidates);
        }
        let mut errors = Vec::new();
        let mut remaining = Vec::new();
        for candidate in candidates {
            let unused_for = candidate.record.last_used.map(|t| age(now, t));
            if unused_for.is_none_or(|d| d > max_age) {
                match self.free_image(records, &candidate, "age").await {
                    Ok(()) => continue,
                    Err(e) => errors.push(e.to_string()),
                }
            }
            remaining.push(candidate);
        }
        if !errors.is_empty() {
            return Err(Error::OldRemoval {
                max_age,
                errors: errors.join("; "),
            });
        }
        Ok(remaining)
    }

    /// Removes candidates in order until `wanted` bytes are freed, skipping those younger
    /// than the minimum age; returns the bytes freed (upstream's `freeSpace`).
    async fn free_space(
        &self,
        records: &mut HashMap<String, Record>,
        wanted: u64,
        now: Timestamp,
        candidates: Vec<Candidate>,
    ) -> Result<u64> {
        let mut freed = 0u64;
        let mut errors = Vec::new();
        for candidate in &candidates {
            if age(now, candidate.record.first_detected) < self.policy.min_age {
                tracing::debug!(image = %candidate.id, "image younger than imageMinimumGCAge, kept");
                continue;
            }
            match self.free_image(records, candidate, "space").await {
                Ok(()) => freed = freed.saturating_add(candidate.record.size),
                Err(e) => {
                    errors.push(e.to_string());
                    continue;
                }
            }
            if freed >= wanted {
                break;
            }
        }
        if !errors.is_empty() {
            return Err(Error::Removal {
                wanted,
                freed,
                errors: errors.join("; "),
            });
        }
        Ok(freed)
    }

    async fn free_image(
        &self,
        records: &mut HashMap<String, Record>,
        candidate: &Candidate,
        reason: &str,
    ) -> Result<(), cri::Error> {
        tracing::info!(
            image = %candidate.id,
            size = candidate.record.size,
            reason,
            "removing image to free bytes"
        );
        self.runtime.remove_image(&candidate.id).await?;
        records.remove(&candidate.id);
        Ok(())
    }
}

/// Every name an image goes by: its id, tags and digests.
fn names(image: &Image) -> impl Iterator<Item = &str> {
    std::iter::once(image.id.as_str())
        .chain(image.repo_tags.iter().map(String::as_str))
        .chain(image.repo_digests.iter().map(String::as_str))
}

#[cfg(test)]
#[path = "image_gc_tests.rs"]
mod tests;
