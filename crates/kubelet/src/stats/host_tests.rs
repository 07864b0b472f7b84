use super::*;

const DEV: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:  500       5    0    0    0     0          0         0      500       5    0    0    0     0       0          0
  eth0: 1000      10    1    0    0     0          0         0     2000      20    2    0    0     0       0          0
veth12:   30       3    0    0    0     0          0         0       40       4    0    0    0     0       0          0
";

fn time() -> Time {
    Time("2026-12-04T10:00:00Z".parse().unwrap())
}

#[test]
fn interfaces_are_read_from_proc_net_dev_with_the_default_one_inline() {
    let net = network_stats(&time(), DEV, Some("eth0"), |n| {
        n != "lo" && !n.starts_with("veth")
    })
    .unwrap();
    let eth0 = InterfaceStats {
        name: "eth0".into(),
        rx_bytes: Some(1000),
        rx_errors: Some(1),
        tx_bytes: Some(2000),
        tx_errors: Some(2),
    };
    assert_eq!(net.default, eth0);
    assert_eq!(net.interfaces, vec![eth0]);
    // a pod without its default interface has no network figures
    assert_eq!(network_stats(&time(), DEV, Some("eth1"), |_| true), None);
    let all = network_stats(&time(), DEV, None, |_| true).unwrap();
    assert_eq!(all.interfaces.len(), 3);
    assert_eq!(all.default, InterfaceStats::default());
}

#[test]
fn the_default_interface_is_the_one_of_the_default_route() {
    let routes =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
cni0\t00002A0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
ens4\t00000000\t0100800A\t0003\t0\t0\t100\t00000000\t0\t0\t0
";
    assert_eq!(default_interface(routes).as_deref(), Some("ens4"));
    assert_eq!(default_interface("Iface\tDestination\n"), None);
}

#[test]
fn the_node_started_when_the_machine_booted() {
    let stat = "cpu  1 2 3\nbtime 1764842400\nprocesses 9\n";
    assert_eq!(
        boot_time(stat).unwrap(),
        "2025-12-04T10:00:00Z".parse::<Timestamp>().unwrap()
    );
    assert_eq!(boot_time("cpu 1"), None);
}

fn container(name: &str, cpu: Option<(u64, u64)>, memory: Option<u64>) -> ContainerStats {
    ContainerStats {
        name: name.into(),
        start_time: time(),
        cpu: cpu.map(|(rate, total)| CpuStats {
            time: time(),
            usage_nano_cores: Some(rate),
            usage_core_nano_seconds: Some(total),
        }),
        memory: memory.map(|m| MemoryStats {
            time: time(),
            available_bytes: Some(1),
            usage_bytes: Some(m * 2),
            working_set_bytes: Some(m),
            rss_bytes: None,
            page_faults: None,
            major_page_faults: None,
        }),
        rootfs: None,
        logs: None,
    }
}

#[test]
fn without_a_pod_cgroup_a_pods_usage_is_the_sum_of_its_containers() {
    let containers = [
        container("a", Some((10, 100)), Some(1000)),
        container("b", Some((5, 50)), Some(500)),
    ];
    let cpu = sum_cpu(&time(), &containers).unwrap();
    assert_eq!(
        (cpu.usage_nano_cores, cpu.usage_core_nano_seconds),
        (Some(15), Some(150))
    );
    let memory = sum_memory(&time(), &containers).unwrap();
    assert_eq!(
        (
            memory.working_set_bytes,
            memory.usage_bytes,
            memory.rss_bytes
        ),
        (Some(1500), Some(3000), None)
    );
    // what one container lacks, the sum lacks
    let partial = [
        container("a", Some((10, 100)), None),
        container("b", None, None),
    ];
    assert_eq!(
        sum_cpu(&time(), &partial).unwrap().usage_nano_cores,
        Some(10)
    );
    assert_eq!(sum_memory(&time(), &partial), None);
}

#[test]
fn a_cgroups_memory_is_available_up_to_its_limit() {
    let m = CgroupMemory {
        usage: 300,
        working_set: 200,
        rss: Some(150),
        page_faults: Some(9),
        major_page_faults: Some(1),
        limit: Some(1000),
    };
    let stats = memory_stats(&time(), &m, m.limit);
    assert_eq!(stats.available_bytes, Some(800));
    assert_eq!(
        (stats.usage_bytes, stats.working_set_bytes, stats.rss_bytes),
        (Some(300), Some(200), Some(150))
    );
    assert_eq!(memory_stats(&time(), &m, None).available_bytes, None);
}
