use super::*;
use crate::api::{NODE_EVENT, RecordingPodApi};
use crate::cri::{ContainerConfig, ContainerMetadata, PodSandboxConfig, image_spec};
use crate::fake::FakeRuntime;
use parking_lot::Mutex;

const PAUSE: &str = "localhost/pause:3.9";

/// A manager over a fake runtime, with a settable clock and image filesystem.
struct Setup {
    runtime: Arc<FakeRuntime>,
    api: Arc<RecordingPodApi>,
    now: Arc<Mutex<Timestamp>>,
    fs: Arc<Mutex<FsStats>>,
    gc: Arc<ImageGcManager>,
}

fn t0() -> Timestamp {
    "2024-01-01T00:00:00Z".parse().unwrap()
}

fn setup(policy: ImageGcPolicy) -> Setup {
    let runtime = Arc::new(FakeRuntime::new());
    let api = Arc::new(RecordingPodApi::default());
    let now = Arc::new(Mutex::new(t0()));
    let fs = Arc::new(Mutex::new(FsStats {
        capacity_bytes: 100_000,
        available_bytes: 100_000,
        ..Default::default()
    }));
    let (clock, stats) = (now.clone(), fs.clone());
    let gc = Arc::new(ImageGcManager::new(
        runtime.clone(),
        api.clone(),
        policy,
        vec![PAUSE.into()],
        Arc::new(move |path: &Path| {
            assert_eq!(path, Path::new("/var/lib/fake/images"));
            Ok(*stats.lock())
        }),
        Arc::new(move || *clock.lock()),
    ));
    runtime.add_image(PAUSE);
    Setup {
        runtime,
        api,
        now,
        fs,
        gc,
    }
}

fn defaults() -> ImageGcPolicy {
    ImageGcPolicy::from_config(&KubeletConfiguration::default())
}

impl Setup {
    fn at(&self, after: Duration) {
        *self.now.lock() = t0() + after;
    }

    /// The image filesystem `used_percent` full, of 10 000 bytes.
    fn usage(&self, used_percent: u64) {
        *self.fs.lock() = FsStats {
            capacity_bytes: 10_000,
            available_bytes: 10_000 - used_percent * 100,
            ..Default::default()
        };
    }

    /// A stopped container of image `image`, in a sandbox of its own.
    async fn container_of(&self, image: &str) -> String {
        let sandbox = PodSandboxConfig::default();
        let id = self
            .runtime
            .run_pod_sandbox(sandbox.clone(), "")
            .await
            .unwrap();
        let config = ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: "c".into(),
                attempt: 0,
            }),
            image: Some(image_spec(image)),
            ..Default::default()
        };
        self.runtime
            .create_container(&id, config, sandbox)
            .await
            .unwrap()
    }

    fn node_events(&self) -> Vec<(String, String)> {
        self.api
            .events()
            .into_iter()
            .filter(|(name, _)| name == NODE_EVENT)
            .map(|(_, e)| (e.reason.to_string(), e.message))
            .collect()
    }
}

const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test]
async fn above_the_high_threshold_unused_images_go_least_recently_used_first_down_to_the_low_threshold()
 {
    let s = setup(defaults());
    for image in ["a", "b", "c", "d"] {
        s.runtime.add_image(image);
    }
    // a used an hour in, b two hours in, c three hours in; d never
    for (hours, image) in [(1, "a"), (2, "b"), (3, "c")] {
        s.at(HOUR * hours);
        let id = s.container_of(image).await;
        s.gc.garbage_collect(t0()).await.unwrap();
        s.runtime.remove_container(&id).await.unwrap();
    }
    s.at(HOUR * 4);
    s.gc.garbage_collect(t0()).await.unwrap();
    assert_eq!(s.runtime.image_names().len(), 5, "below the high threshold");

    // 90% used of 10 000 bytes: 80% means freeing 1 000 bytes; at 95%, 1 500
    s.usage(90);
    s.gc.garbage_collect(t0()).await.unwrap();
    assert_eq!(s.runtime.image_names(), ["a", "b", "c", PAUSE], "d first");
    s.usage(95);
    s.gc.garbage_collect(t0()).await.unwrap();
    assert_eq!(
        s.runtime.image_names(),
        ["c", PAUSE],
        "a then b, least recently used first, and no more than needed"
    );
    assert!(s.node_events().is_empty());
}

#[tokio::test]
async fn images_in_use_pinned_kept_or_younger_than_the_minimum_age_stay_and_not_freeing_enough_is_reported()
 {
    let s = setup(defaults());
    for image in ["running", "exited", "pinned", "old"] {
        s.runtime.add_image(image);
    }
    s.runtime.pin_image("pinned");
    let running = s.container_of("running").await;
    s.runtime.start_container(&running).await.unwrap();
    let exited = s.container_of("exited").await;
    s.runtime.start_container(&exited).await.unwrap();
    s.runtime.exit_container(&exited, 0);
    s.gc.garbage_collect(t0()).await.unwrap();

    s.at(HOUR);
    s.runtime.add_image("young");
    s.usage(100);
    let e = s.gc.garbage_collect(t0()).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::NotEnoughFreed {
                wanted: 2000,
                freed: 1000
            }
        ),
        "{e}"
    );
    assert_eq!(
        s.runtime.image_names(),
        ["exited", PAUSE, "pinned", "running", "young"]
    );
    assert_eq!(
        s.node_events(),
        [(
            "FreeDiskSpaceFailed".to_string(),
            "Failed to garbage collect required amount of images. Attempted to free 2000 bytes, \
             but only found 1000 bytes eligible to free."
                .to_string()
        )]
    );

    // past the minimum age, the young image goes too
    s.at(HOUR + Duration::from_secs(120));
    s.gc.garbage_collect(t0()).await.unwrap_err();
    assert_eq!(
        s.runtime.image_names(),
        ["exited", PAUSE, "pinned", "running"]
    );
}

#[tokio::test]
async fn images_unused_for_the_maximum_age_go_whatever_the_usage_once_the_kubelet_has_run_that_long()
 {
    let s = setup(ImageGcPolicy {
        max_age: HOUR,
        ..defaults()
    });
    s.runtime.add_image("never-used");
    s.runtime.add_image("used-lately");
    s.gc.garbage_collect(t0()).await.unwrap();

    s.at(HOUR / 2);
    let c = s.container_of("used-lately").await;
    s.gc.garbage_collect(t0()).await.unwrap();
    s.runtime.remove_container(&c).await.unwrap();
    assert_eq!(s.runtime.image_names().len(), 3, "not an hour since start");

    s.at(HOUR + Duration::from_secs(60));
    s.gc.garbage_collect(t0()).await.unwrap();
    assert_eq!(s.runtime.image_names(), [PAUSE, "used-lately"]);
    s.at(HOUR * 2);
    s.gc.garbage_collect(t0()).await.unwrap();
    assert_eq!(s.runtime.image_names(), [PAUSE]);
}

#[tokio::test]
async fn delete_unused_images_frees_every_eligible_image_and_says_how_much() {
    let s = setup(defaults());
    s.runtime.add_sized_image("big", 5000);
    s.runtime.add_sized_image("small", 300);
    s.runtime.add_image("used");
    s.container_of("used").await;
    s.gc.garbage_collect(t0()).await.unwrap();
    s.at(HOUR);
    assert_eq!(s.gc.delete_unused_images().await.unwrap(), 5300);
    assert_eq!(s.runtime.image_names(), [PAUSE, "used"]);
    assert!(s.node_events().is_empty());
}

#[tokio::test]
async fn a_filesystem_without_capacity_is_reported_on_the_node() {
    let s = setup(defaults());
    *s.fs.lock() = FsStats::default();
    let e = s.gc.garbage_collect(t0()).await.unwrap_err();
    assert!(matches!(e, Error::InvalidCapacity));
    assert_eq!(
        s.node_events(),
        [(
            "InvalidDiskCapacity".to_string(),
            "invalid capacity 0 on image filesystem".to_string()
        )]
    );
}

#[tokio::test(start_paused = true)]
async fn the_loop_reports_image_gc_failed_only_when_collection_fails_twice_in_a_row() {
    let s = setup(defaults());
    s.runtime.fail("ImageFsInfo", tonic::Code::Unavailable);
    let task = tokio::spawn(s.gc.clone().run(IMAGE_GC_PERIOD));
    tokio::time::sleep(IMAGE_GC_PERIOD / 2).await;
    assert!(s.node_events().is_empty(), "one failure");
    tokio::time::sleep(IMAGE_GC_PERIOD).await;
    task.abort();
    let events = s.node_events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "ImageGCFailed");
    assert!(
        events[0].1.starts_with("reading the image filesystem: "),
        "{}",
        events[0].1
    );
}

#[tokio::test]
async fn the_image_filesystem_is_the_runtimes_mountpoint_with_its_figures() {
    let s = setup(defaults());
    s.runtime.add_sized_image("x", 500);
    s.usage(50);
    let stats = image_fs_stats(s.runtime.as_ref(), &s.gc.fs).await.unwrap();
    assert_eq!(stats.mountpoint, Path::new("/var/lib/fake/images"));
    assert_eq!(stats.images_bytes, 1500);
    assert_eq!(stats.fs.available_bytes, 5000);
    assert!(
        ImageGcPolicy {
            high_threshold_percent: 100,
            ..defaults()
        }
        .disabled()
    );
    assert!(!defaults().disabled());
}
