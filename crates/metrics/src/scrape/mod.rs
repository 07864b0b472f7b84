//! One kubelet's `/metrics/resource` (the Prometheus text format, version 0.0.4) read into a
//! [`Batch`]: the node's and each container's cumulative CPU time and memory working set, with
//! the times the kubelet read them, and the containers' start times. Only those series are
//! read; others are skipped. Parsed by hand: the five series are plain `name{labels} value
//! timestamp` lines, and a general exposition parser would add a dependency for nothing else.

use std::collections::BTreeMap;

use jiff::Timestamp;

/// What a line of the scrape could not be read as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("line {line}: {what}")]
    Line { line: usize, what: &'static str },
}

/// A cumulative CPU time and a working set, each with the time it was read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    /// Core-seconds since the start.
    pub cpu_seconds: f64,
    pub cpu_time: Timestamp,
    /// Bytes.
    pub memory: u64,
    pub memory_time: Timestamp,
}

/// A container by namespace, pod and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContainerKey {
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

/// One container's sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ContainerSample {
    pub usage: Usage,
    pub start_time: Option<Timestamp>,
}

/// One scrape of one kubelet.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Batch {
    pub node: Option<Usage>,
    pub containers: BTreeMap<ContainerKey, ContainerSample>,
}

/// What one series of the scrape says, before it is put together.
#[derive(Default)]
struct Partial {
    cpu: Option<(f64, Timestamp)>,
    memory: Option<(u64, Timestamp)>,
    start: Option<Timestamp>,
}

impl Partial {
    fn usage(&self) -> Option<Usage> {
        let (cpu_seconds, cpu_time) = self.cpu?;
        let (memory, memory_time) = self.memory?;
        Some(Usage {
            cpu_seconds,
            cpu_time,
            memory,
            memory_time,
        })
    }
}

/// Reads a scrape taken at `now` (the time of samples that carry none). A node or container
/// without both its CPU and memory samples is left out, as metrics-server does.
pub fn parse(text: &str, now: Timestamp) -> Result<Batch, Error> {
    let mut node = Partial::default();
    let mut containers: BTreeMap<ContainerKey, Partial> = BTreeMap::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |what| Error::Line {
            line: index + 1,
            what,
        };
        let sample = sample(line).map_err(err)?;
        let time = match sample.millis {
            Some(ms) => {
                Timestamp::from_millisecond(ms).map_err(|_| err("timestamp out of range"))?
            }
            None => now,
        };
        let value = sample.value;
        let container = || -> Result<ContainerKey, Error> {
            let label = |name| {
                sample
                    .labels
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.clone())
                    .ok_or(err("a container sample without its labels"))
            };
            Ok(ContainerKey {
                namespace: label("namespace")?,
                pod: label("pod")?,
                container: label("container")?,
            })
        };
        match sample.name {
            "node_cpu_usage_seconds_total" => node.cpu = Some((value, time)),
            "node_memory_working_set_bytes" => node.memory = Some((value as u64, time)),
            "container_cpu_usage_seconds_total" => {
                containers.entry(container()?).or_default().cpu = Some((value, time));
            }
            "container_memory_working_set_bytes" => {
                containers.entry(container()?).or_default().memory = Some((value as u64, time));
            }
            "container_start_time_seconds" => {
                let start = Timestamp::from_millisecond((value * 1000.0) as i64)
                    .map_err(|_| err("start time out of range"))?;
                containers.entry(container()?).or_default().start = Some(start);
            }
            _ => {}
        }
    }
    Ok(Batch {
        node: node.usage(),
        containers: containers
            .into_iter()
            .filter_map(|(key, p)| {
                let usage = p.usage()?;
                Some((
                    key,
                    ContainerSample {
                        usage,
                        start_time: p.start,
                    },
                ))
            })
            .collect(),
    })
}

/// A sample's labels, values unescaped.
type Labels<'a> = Vec<(&'a str, String)>;

/// One sample line.
struct Sample<'a> {
    name: &'a str,
    labels: Labels<'a>,
    value: f64,
    millis: Option<i64>,
}

/// `name[{label="value",…}] value [timestamp]`.
fn sample(line: &str) -> Result<Sample<'_>, &'static str> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or("a sample without a value")?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let (parsed, after) = label_set(inner)?;
        labels = parsed;
        rest = after;
    }
    let mut fields = rest.split_whitespace();
    let value = fields
        .next()
        .ok_or("a sample without a value")?
        .parse::<f64>()
        .map_err(|_| "a value that is not a number")?;
    let millis = fields
        .next()
        .map(|t| {
            t.parse::<i64>()
                .map_err(|_| "a timestamp that is not a number")
        })
        .transpose()?;
    Ok(Sample {
        name,
        labels,
        value,
        millis,
    })
}

/// The labels up to the closing `}`, values unescaped; the text after it.
fn label_set(mut text: &str) -> Result<(Labels<'_>, &str), &'static str> {
    let mut labels = Vec::new();
    loop {
        text = text.trim_start_matches([' ', ',']);
        if let Some(after) = text.strip_prefix('}') {
            return Ok((labels, after));
        }
        let (name, after) = text
            .split_once("=\"")
            .ok_or("a label without a quoted value")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return Err("an unterminated label value"),
                },
                Some((_, c)) => value.push(c),
                None => return Err("an unterminated label value"),
            }
        };
        labels.push((name.trim(), value));
        text = &after[end + 1..];
    }
}

#[cfg(test)]
mod tests;
