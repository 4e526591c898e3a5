//! Resource usage from the cgroups, for the kubelet's `/metrics/resource` (upstream's resource
//! metrics endpoint, which metrics-server scrapes; r8s's API server scrapes it in-process for
//! `metrics.k8s.io`).
//!
//! Upstream's kubelet asks cAdvisor or the CRI; r8s reads the cgroups it made itself: the pod's
//! cgroup (`<root>/<qos>/pod<uid>`) and, inside it, each container's (runc's cgroupfs driver
//! names it by the container's ID). CPU is the cumulative time (`cpuacct.usage`, or `cpu.stat`'s
//! `usage_usec` on v2); memory is the working set as cAdvisor defines it: usage less the
//! inactive file cache (`total_inactive_file` on v1, `inactive_file` on v2). The node's figures
//! come from `/proc/stat` and `/proc/meminfo`, as the node's root cgroup may not be visible from
//! a nested one.
//!
//! The text is written by hand: `prometheus-client` has no per-sample timestamps, which
//! metrics-server's decoder reads (each sample carries the time it was taken, in ms).

use std::fmt::Write as _;
use std::path::Path;

use crate::cgroups::Layout;

/// Cumulative CPU time and the current memory working set of one cgroup (or the node).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU time, nanoseconds since the cgroup (or the node) started.
    pub cpu_ns: u64,
    /// Memory in use less the inactive file cache, bytes.
    pub working_set: u64,
}

/// One container's usage.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerUsage {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// When the container started, seconds since the epoch.
    pub start_time: f64,
    pub usage: Usage,
}

/// One pod's usage (its cgroup: all its containers and its sandbox).
#[derive(Clone, Debug, PartialEq)]
pub struct PodUsage {
    pub namespace: String,
    pub pod: String,
    pub usage: Usage,
}

/// What `/metrics/resource` reports at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// When the figures were read, milliseconds since the epoch.
    pub timestamp_ms: i64,
    pub node: Option<Usage>,
    pub pods: Vec<PodUsage>,
    pub containers: Vec<ContainerUsage>,
    /// Some cgroup could not be read.
    pub scrape_error: bool,
}

fn read(dir: &Path, file: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(file)).ok()
}

/// The value of `key` in a flat-keyed file such as `memory.stat` or `cpu.stat`.
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The usage of cgroup `path` (relative to each hierarchy's root), if it exists.
pub fn cgroup_usage(layout: &Layout, path: &str) -> Option<Usage> {
    match layout {
        Layout::V1(_) => {
            let cpu_dir = layout.dir("cpuacct", path)?;
            let mem_dir = layout.dir("memory", path)?;
            let cpu_ns = read(&cpu_dir, "cpuacct.usage")?.trim().parse().ok()?;
            let usage: u64 = read(&mem_dir, "memory.usage_in_bytes")?.trim().parse().ok()?;
            let inactive = read(&mem_dir, "memory.stat")
                .and_then(|s| keyed(&s, "total_inactive_file"))
                .unwrap_or(0);
            Some(Usage {
                cpu_ns,
                working_set: usage.saturating_sub(inactive),
            })
        }
        Layout::V2(_) => {
            let dir = layout.dir("", path)?;
            let cpu_ns = keyed(&read(&dir, "cpu.stat")?, "usage_usec")? * 1000;
            let usage: u64 = read(&dir, "memory.current")?.trim().parse().ok()?;
            let inactive = read(&dir, "memory.stat")
                .and_then(|s| keyed(&s, "inactive_file"))
                .unwrap_or(0);
            Some(Usage {
                cpu_ns,
                working_set: usage.saturating_sub(inactive),
            })
        }
    }
}

/// The node's usage from `/proc/stat`'s first line and `/proc/meminfo`'s text: CPU is every
/// busy jiffy (user, nice, system, irq, softirq, steal; not idle or iowait) at `hz` per second;
/// memory is what is neither free nor inactive file cache.
pub fn node_usage(stat: &str, meminfo: &str, hz: u64) -> Option<Usage> {
    let cpu = stat.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    if f.len() < 4 || hz == 0 {
        return None;
    }
    let at = |i: usize| f.get(i).copied().unwrap_or(0);
    let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
    let kib = |key: &str| {
        meminfo.lines().find_map(|l| {
            let rest = l.strip_prefix(key)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
    };
    let total = kib("MemTotal")?;
    let free = kib("MemFree")?;
    let inactive = kib("Inactive(file)").unwrap_or(0);
    Some(Usage {
        cpu_ns: busy * (1_000_000_000 / hz),
        working_set: total.saturating_sub(free).saturating_sub(inactive) * 1024,
    })
}

/// This machine's usage now.
pub fn host_usage() -> Option<Usage> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    node_usage(&stat, &meminfo, if hz > 0 { hz as u64 } else { 100 })
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Seconds with the precision Go's `strconv.FormatFloat(v, 'g', -1, 64)` keeps.
fn seconds(ns: u64) -> String {
    format!("{}", ns as f64 / 1e9)
}

impl Snapshot {
    /// The Prometheus text of upstream's `/metrics/resource`: the same families, HELP texts
    /// and labels, every sample stamped with the time it was read.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let ts = self.timestamp_ms;
        let family = |out: &mut String, name: &str, help: &str, kind: &str| {
            let _ = writeln!(out, "# HELP {name} [STABLE] {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
        };
        let label = |c: &ContainerUsage| {
            format!(
                "container=\"{}\",namespace=\"{}\",pod=\"{}\"",
                escape(&c.container),
                escape(&c.namespace),
                escape(&c.pod)
            )
        };
        let pod_label = |p: &PodUsage| {
            format!(
                "namespace=\"{}\",pod=\"{}\"",
                escape(&p.namespace),
                escape(&p.pod)
            )
        };
        family(
            &mut out,
            "container_cpu_usage_seconds_total",
            "Cumulative cpu time consumed by the container in core-seconds",
            "counter",
        );
        for c in &self.containers {
            let _ = writeln!(
                out,
                "container_cpu_usage_seconds_total{{{}}} {} {ts}",
                label(c),
                seconds(c.usage.cpu_ns)
            );
        }
        family(
            &mut out,
            "container_memory_working_set_bytes",
            "Current working set of the container in bytes",
            "gauge",
        );
        for c in &self.containers {
            let _ = writeln!(
                out,
                "container_memory_working_set_bytes{{{}}} {} {ts}",
                label(c),
                c.usage.working_set
            );
        }
        family(
            &mut out,
            "container_start_time_seconds",
            "Start time of the container since unix epoch in seconds",
            "gauge",
        );
        for c in &self.containers {
            let _ = writeln!(
                out,
                "container_start_time_seconds{{{}}} {} {ts}",
                label(c),
                c.start_time
            );
        }
        if let Some(n) = self.node {
            family(
                &mut out,
                "node_cpu_usage_seconds_total",
                "Cumulative cpu time consumed by the node in core-seconds",
                "counter",
            );
            let _ = writeln!(out, "node_cpu_usage_seconds_total {} {ts}", seconds(n.cpu_ns));
            family(
                &mut out,
                "node_memory_working_set_bytes",
                "Current working set of the node in bytes",
                "gauge",
            );
            let _ = writeln!(out, "node_memory_working_set_bytes {} {ts}", n.working_set);
        }
        family(
            &mut out,
            "pod_cpu_usage_seconds_total",
            "Cumulative cpu time consumed by the pod in core-seconds",
            "counter",
        );
        for p in &self.pods {
            let _ = writeln!(
                out,
                "pod_cpu_usage_seconds_total{{{}}} {} {ts}",
                pod_label(p),
                seconds(p.usage.cpu_ns)
            );
        }
        family(
            &mut out,
            "pod_memory_working_set_bytes",
            "Current working set of the pod in bytes",
            "gauge",
        );
        for p in &self.pods {
            let _ = writeln!(
                out,
                "pod_memory_working_set_bytes{{{}}} {} {ts}",
                pod_label(p),
                p.usage.working_set
            );
        }
        family(
            &mut out,
            "resource_scrape_error",
            "1 if there was an error while getting container metrics, 0 otherwise",
            "gauge",
        );
        let _ = writeln!(out, "resource_scrape_error {}", u8::from(self.scrape_error));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroups::Hierarchy;

    #[test]
    fn node_usage_counts_busy_jiffies_and_memory_not_free_nor_inactive_cache() {
        let stat = "cpu  100 20 30 1000 50 5 5 10 0 0\ncpu0 1 2 3 4\n";
        let meminfo = "MemTotal:       1000 kB\nMemFree:         200 kB\nInactive(file):  300 kB\n";
        let u = node_usage(stat, meminfo, 100).unwrap();
        // 100+20+30+5+5+10 = 170 jiffies at 100 Hz = 1.7 s.
        assert_eq!(u.cpu_ns, 1_700_000_000);
        assert_eq!(u.working_set, 500 * 1024);
        assert_eq!(node_usage("intr 1\n", meminfo, 100), None);
    }

    #[test]
    fn cgroup_usage_on_v1_and_v2_files() {
        let tmp = tempfile::tempdir().unwrap();
        let v1 = Layout::V1(vec![
            Hierarchy {
                controllers: vec!["cpu".into(), "cpuacct".into()],
                mount: tmp.path().join("cpu,cpuacct"),
                root: "/".into(),
            },
            Hierarchy {
                controllers: vec!["memory".into()],
                mount: tmp.path().join("memory"),
                root: "/nested".into(),
            },
        ]);
        let cpu = tmp.path().join("cpu,cpuacct/nested/pods/pod1");
        let mem = tmp.path().join("memory/pods/pod1");
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::create_dir_all(&mem).unwrap();
        assert_eq!(cgroup_usage(&v1, "/nested/pods/pod1"), None, "no files yet");
        std::fs::write(cpu.join("cpuacct.usage"), "123456789\n").unwrap();
        std::fs::write(mem.join("memory.usage_in_bytes"), "10000\n").unwrap();
        std::fs::write(
            mem.join("memory.stat"),
            "cache 5\ninactive_file 1\ntotal_inactive_file 4000\n",
        )
        .unwrap();
        assert_eq!(
            cgroup_usage(&v1, "/nested/pods/pod1"),
            Some(Usage {
                cpu_ns: 123_456_789,
                working_set: 6000
            })
        );

        let v2 = Layout::V2(tmp.path().join("unified"));
        let d = tmp.path().join("unified/pods/pod1");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cpu.stat"), "usage_usec 2500\nuser_usec 2000\n").unwrap();
        std::fs::write(d.join("memory.current"), "8192\n").unwrap();
        std::fs::write(d.join("memory.stat"), "anon 1\ninactive_file 4096\n").unwrap();
        assert_eq!(
            cgroup_usage(&v2, "/pods/pod1"),
            Some(Usage {
                cpu_ns: 2_500_000,
                working_set: 4096
            })
        );
    }

    #[test]
    fn render_has_upstream_families_labels_and_timestamps() {
        let s = Snapshot {
            timestamp_ms: 1_700_000_000_123,
            node: Some(Usage {
                cpu_ns: 1_500_000_000,
                working_set: 2048,
            }),
            pods: vec![PodUsage {
                namespace: "default".into(),
                pod: "web".into(),
                usage: Usage {
                    cpu_ns: 250_000_000,
                    working_set: 1024,
                },
            }],
            containers: vec![ContainerUsage {
                namespace: "default".into(),
                pod: "web".into(),
                container: "c\"1".into(),
                start_time: 1_700_000_000.5,
                usage: Usage {
                    cpu_ns: 200_000_000,
                    working_set: 512,
                },
            }],
            scrape_error: false,
        };
        let text = s.render();
        for line in [
            "# TYPE container_cpu_usage_seconds_total counter",
            "container_cpu_usage_seconds_total{container=\"c\\\"1\",namespace=\"default\",pod=\"web\"} 0.2 1700000000123",
            "container_memory_working_set_bytes{container=\"c\\\"1\",namespace=\"default\",pod=\"web\"} 512 1700000000123",
            "container_start_time_seconds{container=\"c\\\"1\",namespace=\"default\",pod=\"web\"} 1700000000.5 1700000000123",
            "node_cpu_usage_seconds_total 1.5 1700000000123",
            "node_memory_working_set_bytes 2048 1700000000123",
            "pod_cpu_usage_seconds_total{namespace=\"default\",pod=\"web\"} 0.25 1700000000123",
            "pod_memory_working_set_bytes{namespace=\"default\",pod=\"web\"} 1024 1700000000123",
            "# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
            "resource_scrape_error 0",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }
}
