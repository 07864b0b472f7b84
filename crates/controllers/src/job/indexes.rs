//! Completion indexes of Indexed Jobs: a pod's index (its `batch.kubernetes.io/job-completion-index`
//! annotation, or the label of the same name), and `status.completedIndexes` as upstream writes
//! it: ascending, comma-separated, runs of three or more as `first-last` (`1,3-5,7`).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;

/// The annotation and label carrying a pod's completion index.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// A pod's completion index, if it has a valid one.
pub fn of(pod: &Pod) -> Option<i32> {
    let m = &pod.metadata;
    let value = m
        .annotations
        .as_ref()
        .and_then(|a| a.get(COMPLETION_INDEX))
        .or_else(|| m.labels.as_ref().and_then(|l| l.get(COMPLETION_INDEX)))?;
    value.parse::<i32>().ok().filter(|i| *i >= 0)
}

/// Parses `status.completedIndexes`, ignoring anything that is not an index or range below
/// `completions`.
pub fn parse(text: &str, completions: i32) -> BTreeSet<i32> {
    let mut set = BTreeSet::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<i32>(), b.parse::<i32>()),
            None => (part.parse::<i32>(), part.parse::<i32>()),
        };
        if let (Ok(first), Ok(last)) = (first, last) {
            set.extend((first.max(0)..=last.min(completions - 1)).filter(|_| first <= last));
        }
    }
    set
}

/// Formats a set of indexes as `status.completedIndexes`.
pub fn format(set: &BTreeSet<i32>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut iter = set.iter().copied().peekable();
    while let Some(first) = iter.next() {
        let mut last = first;
        while iter.peek() == Some(&(last + 1)) {
            last = iter.next().unwrap_or(last);
        }
        match last - first {
            0 => out.push(first.to_string()),
            1 => out.push(format!("{first},{last}")),
            _ => out.push(format!("{first}-{last}")),
        }
    }
    out.join(",")
}

/// The first `count` indexes below `completions` that are in neither `done` nor `taken`.
pub fn first_pending(
    count: usize,
    completions: i32,
    done: &BTreeSet<i32>,
    taken: &BTreeSet<i32>,
) -> Vec<i32> {
    (0..completions)
        .filter(|i| !done.contains(i) && !taken.contains(i))
        .take(count)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completed_indexes_round_trip_with_ranges_of_three_or_more() {
        let set: BTreeSet<i32> = [0, 1, 3, 4, 5, 7].into_iter().collect();
        assert_eq!(format(&set), "0,1,3-5,7");
        assert_eq!(parse("0,1,3-5,7", 10), set);
        assert_eq!(format(&BTreeSet::new()), "");
    }

    #[test]
    fn parsing_drops_indexes_at_or_above_completions_and_garbage() {
        let set = parse("1-4,x,9,3-2", 3);
        assert_eq!(set.into_iter().collect::<Vec<_>>(), vec![1, 2]);
    }

    #[test]
    fn pending_indexes_skip_done_and_taken_ones() {
        let done = [0, 2].into_iter().collect();
        let taken = [1].into_iter().collect();
        assert_eq!(first_pending(2, 6, &done, &taken), vec![3, 4]);
        assert_eq!(first_pending(9, 4, &done, &taken), vec![3]);
    }

    #[test]
    fn a_pods_index_comes_from_its_annotation_or_label() {
        let mut pod = Pod::default();
        assert_eq!(of(&pod), None);
        pod.metadata.labels = Some([(COMPLETION_INDEX.to_string(), "4".to_string())].into());
        assert_eq!(of(&pod), Some(4));
        pod.metadata.annotations = Some([(COMPLETION_INDEX.to_string(), "2".to_string())].into());
        assert_eq!(of(&pod), Some(2));
        pod.metadata.annotations = Some([(COMPLETION_INDEX.to_string(), "-1".to_string())].into());
        assert_eq!(of(&pod), None);
    }
}
