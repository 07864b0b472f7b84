//! The cgroup filesystem behind [`CgroupFs`]: which hierarchies are mounted ([`Layout`]: cgroup
//! v1 with one hierarchy per mount, or the v2 unified hierarchy), directories made and removed,
//! control files read and written, and processes killed. [`RealCgroupFs`] does this on this
//! machine; [`FakeCgroupFs`] keeps an in-memory tree, records every write and can be told to
//! fail, for the unit tests of [`super::driver`] and [`super::PodCgroups`].

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

/// The cgroup hierarchies mounted on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// cgroup v1 (also hybrid hosts, whose controller-less v2 mount is left alone): one
    /// hierarchy per mount.
    V1(Vec<Hierarchy>),
    /// cgroup v2: one unified hierarchy mounted here.
    V2(PathBuf),
}

/// One cgroup v1 hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    /// Its controllers (`cpu`, `cpuacct`…), or its name for a named hierarchy (`name=systemd`).
    pub controllers: Vec<String>,
    pub mount: PathBuf,
}

impl Hierarchy {
    pub fn has(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }
}

/// The v1 controllers the kernel knows (others in a cgroup mount's options are mount options).
const V1_CONTROLLERS: &[&str] = &[
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "devices",
    "freezer",
    "blkio",
    "pids",
    "hugetlb",
    "net_cls",
    "net_prio",
    "perf_event",
    "rdma",
    "misc",
];

/// The hierarchies of `/proc/self/mountinfo`: v1 if any v1 hierarchy is mounted (a hybrid
/// host's v2 mount has no controllers), else the v2 mount; None when no cgroup filesystem is
/// mounted.
pub fn parse_mountinfo(mountinfo: &str) -> Option<Layout> {
    let mut v1: Vec<Hierarchy> = Vec::new();
    let mut v2 = None;
    for line in mountinfo.lines() {
        // the fields before " - " are fixed up to the mount point; after it come the type,
        // the source and the superblock options
        let Some((head, tail)) = line.split_once(" - ") else {
            continue;
        };
        let Some(mount) = head.split(' ').nth(4) else {
            continue;
        };
        let mut tail = tail.split(' ');
        let (fstype, options) = (tail.next(), tail.nth(1).unwrap_or(""));
        match fstype {
            Some("cgroup") => {
                let controllers: Vec<String> = options
                    .split(',')
                    .filter(|o| V1_CONTROLLERS.contains(o) || o.starts_with("name="))
                    .map(String::from)
                    .collect();
                // a hierarchy mounted twice is one hierarchy
                if !controllers.is_empty() && !v1.iter().any(|h| h.controllers == controllers) {
                    v1.push(Hierarchy {
                        controllers,
                        mount: PathBuf::from(mount),
                    });
                }
            }
            Some("cgroup2") if v2.is_none() => v2 = Some(PathBuf::from(mount)),
            _ => {}
        }
    }
    if !v1.is_empty() {
        Some(Layout::V1(v1))
    } else {
        v2.map(Layout::V2)
    }
}

/// The cgroup filesystem.
pub trait CgroupFs: Send + Sync {
    /// The hierarchies mounted on the host.
    fn layout(&self) -> io::Result<Layout>;
    fn exists(&self, dir: &Path) -> bool;
    /// Makes a cgroup directory whose parent exists; one that exists is success.
    fn create_dir(&self, dir: &Path) -> io::Result<()>;
    /// Removes a cgroup without children or processes (rmdir); a missing one is success.
    fn remove_dir(&self, dir: &Path) -> io::Result<()>;
    /// The names of a cgroup's child cgroups.
    fn children(&self, dir: &Path) -> io::Result<Vec<String>>;
    fn read(&self, file: &Path) -> io::Result<String>;
    fn write(&self, file: &Path, value: &str) -> io::Result<()>;
    /// Sends SIGKILL to a process; one that is gone is success.
    fn kill(&self, pid: i32) -> io::Result<()>;
}

/// [`CgroupFs`] on this machine.
#[derive(Debug, Default)]
pub struct RealCgroupFs;

impl CgroupFs for RealCgroupFs {
    fn layout(&self) -> io::Result<Layout> {
        let info = std::fs::read_to_string("/proc/self/mountinfo")?;
        parse_mountinfo(&info).ok_or_else(|| io::Error::other("no cgroup filesystem is mounted"))
    }

    fn exists(&self, dir: &Path) -> bool {
        dir.is_dir()
    }

    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        match std::fs::create_dir(dir) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            r => r,
        }
    }

    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        match std::fs::remove_dir(dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
    }

    fn children(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                out.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        Ok(out)
    }

    fn read(&self, file: &Path) -> io::Result<String> {
        std::fs::read_to_string(file)
    }

    fn write(&self, file: &Path, value: &str) -> io::Result<()> {
        // cgroup files take one value per write(2), never created or truncated
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().write(true).open(file)?;
        f.write_all(value.as_bytes())
    }

    fn kill(&self, pid: i32) -> io::Result<()> {
        let Some(pid) = rustix::process::Pid::from_raw(pid) else {
            return Ok(());
        };
        match rustix::process::kill_process(pid, rustix::process::Signal::KILL) {
            Err(rustix::io::Errno::SRCH) => Ok(()),
            r => r.map_err(io::Error::from),
        }
    }
}

/// One change a [`FakeCgroupFs`] was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsCall {
    CreateDir(PathBuf),
    RemoveDir(PathBuf),
    Write(PathBuf, String),
    Kill(i32),
}

/// An in-memory [`CgroupFs`]: directories and file contents, every change recorded.
#[derive(Debug)]
pub struct FakeCgroupFs {
    pub layout: Layout,
    /// Guards the record; held for one call.
    pub calls: Mutex<Vec<FsCall>>,
    pub dirs: Mutex<BTreeSet<PathBuf>>,
    /// Control files' contents (what was last written, or set by the test).
    pub files: Mutex<BTreeMap<PathBuf, String>>,
    /// Writes to files whose name is here fail with this message.
    pub fail_writes: Mutex<BTreeMap<String, String>>,
}

impl FakeCgroupFs {
    /// A fake whose hierarchies' mount points exist.
    pub fn new(layout: Layout) -> FakeCgroupFs {
        let mounts: BTreeSet<PathBuf> = match &layout {
            Layout::V1(hierarchies) => hierarchies.iter().map(|h| h.mount.clone()).collect(),
            Layout::V2(mount) => [mount.clone()].into(),
        };
        FakeCgroupFs {
            layout,
            calls: Mutex::default(),
            dirs: Mutex::new(mounts),
            files: Mutex::default(),
            fail_writes: Mutex::default(),
        }
    }

    /// This host's v1 layout: one hierarchy per controller under `/sys/fs/cgroup`, and the
    /// named `systemd` one.
    pub fn v1() -> FakeCgroupFs {
        let hierarchy = |c: &str, dir: &str| Hierarchy {
            controllers: vec![c.to_string()],
            mount: Path::new("/sys/fs/cgroup").join(dir),
        };
        let mut hierarchies: Vec<Hierarchy> = ["cpu", "cpuacct", "cpuset", "memory", "pids"]
            .iter()
            .map(|c| hierarchy(c, c))
            .collect();
        hierarchies.push(hierarchy("name=systemd", "systemd"));
        let fake = FakeCgroupFs::new(Layout::V1(hierarchies));
        fake.set_file("/sys/fs/cgroup/cpuset/cpuset.cpus", "0-1\n");
        fake.set_file("/sys/fs/cgroup/cpuset/cpuset.mems", "0\n");
        fake
    }

    /// A v2 host: the unified hierarchy at `/sys/fs/cgroup`.
    pub fn v2() -> FakeCgroupFs {
        let fake = FakeCgroupFs::new(Layout::V2("/sys/fs/cgroup".into()));
        fake.set_file(
            "/sys/fs/cgroup/cgroup.controllers",
            "cpuset cpu io memory pids\n",
        );
        fake
    }

    pub fn set_file(&self, path: impl Into<PathBuf>, value: &str) {
        self.files.lock().insert(path.into(), value.to_string());
    }

    /// The file's content, if it was written or set.
    pub fn file(&self, path: impl AsRef<Path>) -> Option<String> {
        self.files.lock().get(path.as_ref()).cloned()
    }

    pub fn has_dir(&self, path: impl AsRef<Path>) -> bool {
        self.dirs.lock().contains(path.as_ref())
    }

    /// The paths written, in order, with their values.
    pub fn writes(&self) -> Vec<(PathBuf, String)> {
        self.calls
            .lock()
            .iter()
            .filter_map(|c| match c {
                FsCall::Write(p, v) => Some((p.clone(), v.clone())),
                _ => None,
            })
            .collect()
    }
}

impl CgroupFs for FakeCgroupFs {
    fn layout(&self) -> io::Result<Layout> {
        Ok(self.layout.clone())
    }

    fn exists(&self, dir: &Path) -> bool {
        self.dirs.lock().contains(dir)
    }

    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        let mut dirs = self.dirs.lock();
        if !dir.parent().is_some_and(|p| dirs.contains(p)) {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        if dirs.insert(dir.to_path_buf()) {
            self.calls.lock().push(FsCall::CreateDir(dir.to_path_buf()));
        }
        Ok(())
    }

    fn remove_dir(&self, dir: &Path) -> io::Result<()> {
        let mut dirs = self.dirs.lock();
        if !dirs.contains(dir) {
            return Ok(());
        }
        let busy = dirs.iter().any(|d| d.parent() == Some(dir))
            || self
                .files
                .lock()
                .get(&dir.join("cgroup.procs"))
                .is_some_and(|p| !p.trim().is_empty());
        if busy {
            return Err(io::Error::from(io::ErrorKind::ResourceBusy));
        }
        dirs.remove(dir);
        self.files.lock().retain(|f, _| f.parent() != Some(dir));
        self.calls.lock().push(FsCall::RemoveDir(dir.to_path_buf()));
        Ok(())
    }

    fn children(&self, dir: &Path) -> io::Result<Vec<String>> {
        Ok(self
            .dirs
            .lock()
            .iter()
            .filter(|d| d.parent() == Some(dir))
            .filter_map(|d| Some(d.file_name()?.to_string_lossy().into_owned()))
            .collect())
    }

    fn read(&self, file: &Path) -> io::Result<String> {
        if let Some(content) = self.files.lock().get(file) {
            return Ok(content.clone());
        }
        if file.parent().is_some_and(|p| self.dirs.lock().contains(p)) {
            // a control file nobody wrote: empty (cgroup.procs of an empty cgroup, cpuset.cpus
            // of a new cpuset)
            return Ok(String::new());
        }
        Err(io::Error::from(io::ErrorKind::NotFound))
    }

    fn write(&self, file: &Path, value: &str) -> io::Result<()> {
        if !file.parent().is_some_and(|p| self.dirs.lock().contains(p)) {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        if let Some(why) = self.fail_writes.lock().get(name.as_ref()) {
            return Err(io::Error::other(why.clone()));
        }
        self.calls
            .lock()
            .push(FsCall::Write(file.to_path_buf(), value.to_string()));
        self.files
            .lock()
            .insert(file.to_path_buf(), value.to_string());
        Ok(())
    }

    fn kill(&self, pid: i32) -> io::Result<()> {
        self.calls.lock().push(FsCall::Kill(pid));
        // the process is gone from every cgroup
        for content in self.files.lock().values_mut() {
            if content.lines().any(|l| l.trim() == pid.to_string()) {
                *content = content
                    .lines()
                    .filter(|l| l.trim() != pid.to_string())
                    .map(|l| format!("{l}\n"))
                    .collect();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hybrid_host_is_read_as_v1_with_its_named_hierarchy() {
        let info = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpuacct,cpu
34 31 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        let Some(Layout::V1(h)) = parse_mountinfo(info) else {
            panic!("not v1")
        };
        let names: Vec<Vec<String>> = h.iter().map(|h| h.controllers.clone()).collect();
        assert_eq!(
            names,
            [
                vec!["cpu".to_string()],
                vec!["cpuacct".into(), "cpu".into()],
                vec!["memory".into()],
                vec!["name=systemd".into()],
            ]
        );
        assert_eq!(h[1].mount, Path::new("/sys/fs/cgroup/cpu,cpuacct"));
    }

    #[test]
    fn a_unified_host_is_read_as_v2() {
        let info = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            parse_mountinfo(info),
            Some(Layout::V2("/sys/fs/cgroup".into()))
        );
        assert_eq!(
            parse_mountinfo("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"),
            None
        );
    }
}
