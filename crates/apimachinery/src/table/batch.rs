//! Tables of batch/v1 resources: jobs (status from conditions, completions, duration) and cron
//! jobs (upstream's `printJob` and `printCronJob`).

use super::duration::human_duration;
use super::format::{bool_ptr, containers, label_selector};
use super::value::{age, int, list, name, opt_bool, opt_int, present, since, text, time};
use super::{AGE, Column, NAME, Printer};
use jiff::Timestamp;
use serde_json::Value;

const CONTAINERS: Column = Column::new(
    "Containers",
    "string",
    1,
    "Names of the containers in the pod template.",
);
const IMAGES: Column = Column::new(
    "Images",
    "string",
    1,
    "Images of the containers in the pod template.",
);
const SELECTOR: Column = Column::new("Selector", "string", 1, "Label selector of the job's pods.");

pub(super) static JOBS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Status",
            "string",
            0,
            "Complete, Failed, Terminating, Suspended, FailureTarget or Running.",
        ),
        Column::new(
            "Completions",
            "string",
            0,
            "Succeeded pods out of the completions wanted.",
        ),
        Column::new(
            "Duration",
            "string",
            0,
            "Time the job ran, or has been running.",
        ),
        AGE,
        CONTAINERS,
        IMAGES,
        SELECTOR,
    ],
    cells: job_cells,
};

/// Whether the job's first condition of `type_` has status True (`hasJobCondition`).
fn has_condition(job: &Value, type_: &str) -> bool {
    list(job, "/status/conditions")
        .iter()
        .find(|c| text(c, "/type") == type_)
        .is_some_and(|c| text(c, "/status") == "True")
}

fn job_cells(job: &Value, now: Timestamp) -> Vec<Value> {
    let succeeded = int(job, "/status/succeeded");
    let completions = match opt_int(job, "/spec/completions") {
        Some(n) => format!("{succeeded}/{n}"),
        None => match int(job, "/spec/parallelism") {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let duration = match (
        time(job, "/status/startTime"),
        time(job, "/status/completionTime"),
    ) {
        (None, _) => String::new(),
        (Some(start), None) => human_duration(now.duration_since(start)),
        (Some(start), Some(end)) => human_duration(end.duration_since(start)),
    };
    let status = if has_condition(job, "Complete") {
        "Complete"
    } else if has_condition(job, "Failed") {
        "Failed"
    } else if present(job, "/metadata/deletionTimestamp") {
        "Terminating"
    } else if has_condition(job, "Suspended") {
        "Suspended"
    } else if has_condition(job, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (names, images) = containers(list(job, "/spec/template/spec/containers"));
    vec![
        name(job).into(),
        status.into(),
        completions.into(),
        duration.into(),
        age(job, now),
        names.into(),
        images.into(),
        label_selector(job.pointer("/spec/selector")).into(),
    ]
}

pub(super) static CRON_JOBS: Printer = Printer {
    columns: &[
        NAME,
        Column::new("Schedule", "string", 0, "The cron schedule."),
        Column::new(
            "Timezone",
            "string",
            0,
            "Time zone the schedule is read in.",
        ),
        Column::new("Suspend", "boolean", 0, "Whether new runs are suspended."),
        Column::new("Active", "integer", 0, "Number of jobs running now."),
        Column::new(
            "Last Schedule",
            "string",
            0,
            "Time since a job was last scheduled.",
        ),
        AGE,
        CONTAINERS,
        IMAGES,
        SELECTOR,
    ],
    cells: cron_job_cells,
};

fn cron_job_cells(cj: &Value, now: Timestamp) -> Vec<Value> {
    let last_schedule = if present(cj, "/status/lastScheduleTime") {
        since(time(cj, "/status/lastScheduleTime"), now)
    } else {
        "<none>".to_string()
    };
    let time_zone = cj
        .pointer("/spec/timeZone")
        .and_then(Value::as_str)
        .unwrap_or("<none>");
    // The decoder defaults `suspend` to false.
    let suspend = bool_ptr(Some(opt_bool(cj, "/spec/suspend").unwrap_or(false)));
    let (names, images) = containers(list(cj, "/spec/jobTemplate/spec/template/spec/containers"));
    vec![
        name(cj).into(),
        text(cj, "/spec/schedule").into(),
        time_zone.into(),
        suspend.into(),
        (list(cj, "/status/active").len() as i64).into(),
        last_schedule.into(),
        age(cj, now),
        names.into(),
        images.into(),
        label_selector(cj.pointer("/spec/jobTemplate/spec/selector")).into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2024-05-01T12:00:00Z".parse().unwrap()
    }

    fn job(spec: Value, status: Value) -> Value {
        json!({"metadata": {"name": "pi", "creationTimestamp": "2024-05-01T11:00:00Z"},
               "spec": spec, "status": status})
    }

    #[test]
    fn jobs_show_status_completions_duration_and_template() {
        let spec = json!({"completions": 3, "parallelism": 2,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u1"}},
            "template": {"spec": {"containers": [{"name": "pi", "image": "perl:5.34"}]}}});
        let status = json!({"succeeded": 3, "startTime": "2024-05-01T11:00:05Z",
            "completionTime": "2024-05-01T11:02:10Z",
            "conditions": [{"type": "Complete", "status": "True"}]});
        assert_eq!(
            job_cells(&job(spec, status), now()),
            [
                json!("pi"),
                json!("Complete"),
                json!("3/3"),
                json!("2m5s"),
                json!("60m"),
                json!("pi"),
                json!("perl:5.34"),
                json!("batch.kubernetes.io/controller-uid=u1")
            ]
        );
    }

    #[test]
    fn job_completions_without_a_count_depend_on_parallelism() {
        let cases = [
            (json!({}), "0/1"),
            (json!({"parallelism": 1}), "0/1"),
            (json!({"parallelism": 4}), "0/1 of 4"),
            (json!({"completions": 0}), "0/0"),
        ];
        for (spec, want) in cases {
            assert_eq!(job_cells(&job(spec, json!({})), now())[2], json!(want));
        }
    }

    #[test]
    fn a_running_job_measures_duration_until_now_and_unstarted_ones_show_nothing() {
        let running = job(
            json!({}),
            json!({"startTime": "2024-05-01T11:57:00Z", "active": 1}),
        );
        assert_eq!(
            job_cells(&running, now())[1..4],
            [json!("Running"), json!("0/1"), json!("3m")]
        );
        assert_eq!(job_cells(&job(json!({}), json!({})), now())[3], json!(""));
    }

    #[test]
    fn job_status_follows_upstreams_precedence() {
        let with = |conditions: Value, deleting: bool| {
            let mut j = job(json!({}), json!({"conditions": conditions}));
            if deleting {
                j["metadata"]["deletionTimestamp"] = json!("2024-05-01T11:59:00Z");
            }
            job_cells(&j, now())[1].clone()
        };
        let t = |type_: &str| json!({"type": type_, "status": "True"});
        assert_eq!(
            with(json!([t("FailureTarget"), t("Failed")]), true),
            json!("Failed")
        );
        assert_eq!(with(json!([t("Suspended")]), true), json!("Terminating"));
        assert_eq!(
            with(json!([t("FailureTarget"), t("Suspended")]), false),
            json!("Suspended")
        );
        assert_eq!(
            with(json!([t("FailureTarget")]), false),
            json!("FailureTarget")
        );
        assert_eq!(
            with(
                json!([{"type": "Complete", "status": "False"}, t("Complete")]),
                false
            ),
            json!("Running")
        );
    }

    #[test]
    fn cron_jobs_show_schedule_zone_suspension_activity_and_last_run() {
        let cj = json!({
            "metadata": {"name": "nightly", "creationTimestamp": "2024-04-01T12:00:00Z"},
            "spec": {"schedule": "0 3 * * *", "timeZone": "Europe/Paris", "suspend": true,
                "jobTemplate": {"spec": {"template": {"spec": {"containers": [
                    {"name": "backup", "image": "restic"}]}}}}},
            "status": {"active": [{"name": "nightly-1"}], "lastScheduleTime": "2024-05-01T03:00:00Z"}
        });
        assert_eq!(
            cron_job_cells(&cj, now()),
            [
                json!("nightly"),
                json!("0 3 * * *"),
                json!("Europe/Paris"),
                json!("True"),
                json!(1),
                json!("9h"),
                json!("30d"),
                json!("backup"),
                json!("restic"),
                json!("<none>")
            ]
        );
        let fresh = json!({"spec": {"schedule": "@hourly"}});
        assert_eq!(
            cron_job_cells(&fresh, now())[2..6],
            [json!("<none>"), json!("False"), json!(0), json!("<none>")]
        );
    }
}
