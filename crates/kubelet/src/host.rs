//! Facts about this machine that the Node object reports: CPUs, memory, disk under the data
//! dir, kernel and OS, machine and boot ids, hostname and the node's IP. Read once per status
//! update; nothing here writes.

use std::net::IpAddr;
use std::path::Path;

/// What the node reports about its host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostInfo {
    pub hostname: String,
    /// The address other nodes and the API server reach this node on (`InternalIP`).
    pub ip: IpAddr,
    pub cpus: u32,
    pub memory_bytes: u64,
    /// Size of the filesystem holding the data dir.
    pub ephemeral_storage_bytes: u64,
    pub kernel_version: String,
    pub os_image: String,
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
}

impl HostInfo {
    /// Reads the host; `ip` overrides the detected address, `data_dir` is where ephemeral
    /// storage lives.
    pub fn read(ip: Option<IpAddr>, data_dir: &Path) -> HostInfo {
        let file = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let machine_id = file("/etc/machine-id");
        let system_uuid = match file("/sys/class/dmi/id/product_uuid") {
            s if s.is_empty() => machine_id.clone(),
            s => s,
        };
        HostInfo {
            hostname: file("/proc/sys/kernel/hostname"),
            ip: ip.unwrap_or_else(detect_ip),
            cpus: std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(1),
            memory_bytes: meminfo_field(&file("/proc/meminfo"), "MemTotal").unwrap_or(0),
            ephemeral_storage_bytes: crate::fs_stats::fs_stats(data_dir)
                .map_or(0, |s| s.capacity_bytes),
            kernel_version: file("/proc/sys/kernel/osrelease"),
            os_image: os_pretty_name(&file("/etc/os-release"))
                .unwrap_or_else(|| "Linux".to_string()),
            machine_id,
            system_uuid,
            boot_id: file("/proc/sys/kernel/random/boot_id"),
        }
    }
}

/// How many processes the host runs at most (upstream's `pidlimit.Stats`: the smaller of
/// `kernel.pid_max` and `kernel.threads-max`), the `pid` capacity that `kubepods`' limit is
/// taken from.
pub fn max_pids() -> Option<i64> {
    let read = |p: &str| std::fs::read_to_string(p).ok()?.trim().parse::<i64>().ok();
    match (
        read("/proc/sys/kernel/pid_max"),
        read("/proc/sys/kernel/threads-max"),
    ) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The source address of the default route: connecting a UDP socket sends nothing but makes
/// the kernel pick it. Loopback when there is no route.
fn detect_ip() -> IpAddr {
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            s.connect("192.0.2.1:9")?;
            s.local_addr()
        })
        .map(|a| a.ip())
        .unwrap_or(IpAddr::from([127, 0, 0, 1]))
}

/// A `Key:   123 kB` line of `/proc/meminfo`, in bytes.
pub fn meminfo_field(meminfo: &str, key: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        let kib: u64 = rest.split_whitespace().next()?.parse().ok()?;
        Some(kib * 1024)
    })
}

/// `PRETTY_NAME` from /etc/os-release.
pub fn os_pretty_name(os_release: &str) -> Option<String> {
    let line = os_release.lines().find(|l| l.starts_with("PRETTY_NAME="))?;
    Some(line["PRETTY_NAME=".len()..].trim_matches('"').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_read_from_meminfo_in_bytes() {
        let meminfo = "MemTotal:        4028776 kB\nMemFree:          123 kB\n";
        assert_eq!(meminfo_field(meminfo, "MemTotal"), Some(4028776 * 1024));
        assert_eq!(meminfo_field(meminfo, "MemFree"), Some(123 * 1024));
        assert_eq!(meminfo_field(meminfo, "Mem"), None);
    }

    #[test]
    fn the_os_image_is_the_pretty_name() {
        let release = "NAME=\"Debian GNU/Linux\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n";
        assert_eq!(
            os_pretty_name(release).as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
    }
}
