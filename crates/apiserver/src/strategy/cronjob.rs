//! CronJobs: upstream's defaults (`SetDefaults_CronJob`: concurrency Allow, not suspended, 3
//! successful and 1 failed Jobs kept; pod defaults in the Job template) and `validateCronJobSpec`
//! (a cron schedule robfig/cron accepts, no `TZ=` in new schedules, a known time zone, the
//! concurrency policy, a Job template whose selector is generated, names of at most 52
//! characters so the Jobs' names fit).

use serde_json::{Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::Strategy;
use super::common::{default_template, nonnegative, object_at, set_default};
use super::cron::{load_location, parse_standard};
use super::generic::settle_generation;
use super::job::validate_job_spec;

/// Longest CronJob name: a Job name (a DNS label) minus the 11 characters of `-{timestamp}`.
const MAX_NAME_LENGTH: usize = 52;

#[derive(Debug)]
pub struct CronJobStrategy;

fn defaults(cj: &mut Value) {
    let spec = object_at(cj, "spec");
    set_default(spec, "concurrencyPolicy", json!("Allow"));
    set_default(spec, "suspend", json!(false));
    set_default(spec, "successfulJobsHistoryLimit", json!(3));
    set_default(spec, "failedJobsHistoryLimit", json!(1));
    let job_spec = object_at(object_at(spec, "jobTemplate"), "spec");
    let template = object_at(job_spec, "template");
    object_at(template, "spec");
    default_template(Some(template));
}

/// Upstream's `validateTimeZone`.
fn validate_time_zone(zone: &Value, path: &FieldPath) -> Vec<FieldError> {
    let Some(zone) = zone.as_str() else {
        return Vec::new();
    };
    if zone.is_empty() {
        return vec![FieldError::invalid(
            path,
            zone,
            "timeZone must be nil or non-empty string",
        )];
    }
    let valid_part = |p: &str| {
        (1..=14).contains(&p.len())
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-+".contains(&b))
            && !matches!(p, "." | "..")
            && !p.starts_with('-')
    };
    if !zone.split('/').all(valid_part) {
        return vec![FieldError::invalid(
            path,
            zone,
            format!("unknown time zone {zone}"),
        )];
    }
    let mut errs = Vec::new();
    if zone.eq_ignore_ascii_case("Local") {
        errs.push(FieldError::invalid(
            path,
            zone,
            "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
        ));
    }
    if let Err(e) = load_location(zone) {
        errs.push(FieldError::invalid(path, zone, e));
    }
    errs
}

/// Upstream's `validateCronJobSpec`; `old` is the stored spec on update.
fn validate_spec(spec: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let path = FieldPath::new("spec");
    let mut errs = Vec::new();
    let schedule_path = path.child("schedule");
    let time_zone = spec.get("timeZone").filter(|z| !z.is_null());
    match spec.get("schedule").and_then(Value::as_str).unwrap_or("") {
        "" => errs.push(FieldError::required(&schedule_path, "")),
        schedule => {
            if let Err(e) = parse_standard(schedule) {
                errs.push(FieldError::invalid(&schedule_path, schedule, e));
            }
            let allow_tz = old
                .and_then(|o| o.get("schedule"))
                .and_then(Value::as_str)
                .is_some_and(|s| s.contains("TZ"));
            if schedule.contains("TZ") {
                if !allow_tz {
                    errs.push(FieldError::invalid(
                        &schedule_path,
                        schedule,
                        "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
                    ));
                } else if time_zone.is_some() {
                    errs.push(FieldError::invalid(
                        &schedule_path,
                        schedule,
                        "cannot use both timeZone field and TZ or CRON_TZ in schedule",
                    ));
                }
            }
        }
    }
    for field in [
        "startingDeadlineSeconds",
        "successfulJobsHistoryLimit",
        "failedJobsHistoryLimit",
    ] {
        errs.extend(nonnegative(spec.get(field), &path.child(field)));
    }
    let old_zone = old.and_then(|o| o.get("timeZone")).filter(|z| !z.is_null());
    if let Some(zone) = time_zone
        && (old.is_none() || old_zone != time_zone)
    {
        errs.extend(validate_time_zone(zone, &path.child("timeZone")));
    }
    let policy_path = path.child("concurrencyPolicy");
    match spec
        .get("concurrencyPolicy")
        .and_then(Value::as_str)
        .unwrap_or("")
    {
        "Allow" | "Forbid" | "Replace" => {}
        "" => errs.push(FieldError::required(&policy_path, "")),
        other => errs.push(FieldError::not_supported(
            &policy_path,
            other,
            &["Allow", "Forbid", "Replace"],
        )),
    }
    let job_path = path.child("jobTemplate").child("spec");
    let null = Value::Null;
    let job_spec = spec.pointer("/jobTemplate/spec").unwrap_or(&null);
    errs.extend(validate_job_spec(job_spec, &job_path));
    if let Some(selector) = job_spec.get("selector").filter(|s| !s.is_null()) {
        errs.push(FieldError::invalid(
            &job_path.child("selector"),
            selector.clone(),
            "`selector` will be auto-generated",
        ));
    }
    if job_spec.get("manualSelector") == Some(&json!(true)) {
        errs.push(FieldError::not_supported(
            &job_path.child("manualSelector"),
            true,
            &["nil", "false"],
        ));
    }
    errs
}

impl Strategy for CronJobStrategy {
    fn prepare_for_create(&self, cj: &mut Value) {
        defaults(cj);
    }

    fn prepare_for_update(&self, cj: &mut Value, old: &Value) {
        defaults(cj);
        settle_generation(cj, old);
    }

    fn validate(&self, cj: &Value) -> Vec<FieldError> {
        let mut errs = validate_spec(cj.get("spec").unwrap_or(&Value::Null), None);
        let name = cj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        if name.len() > MAX_NAME_LENGTH {
            errs.push(FieldError::invalid(
                &FieldPath::new("metadata").child("name"),
                name,
                format!("must be no more than {MAX_NAME_LENGTH} characters"),
            ));
        }
        errs
    }

    fn validate_update(&self, cj: &Value, old: &Value) -> Vec<FieldError> {
        // Longer names of old CronJobs may stay, so they can still be updated and deleted.
        validate_spec(cj.get("spec").unwrap_or(&Value::Null), old.get("spec"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created() -> Value {
        let mut cj = json!({"metadata": {"name": "nightly"},
            "spec": {"schedule": "0 3 * * *",
                     "jobTemplate": {"spec": {"template": {"spec": {
                         "restartPolicy": "OnFailure",
                         "containers": [{"name": "c", "image": "busybox"}]}}}}}});
        CronJobStrategy.prepare_for_create(&mut cj);
        cj
    }

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_new_cronjob_gets_upstreams_defaults() {
        let cj = created();
        let spec = &cj["spec"];
        assert_eq!(spec["concurrencyPolicy"], "Allow");
        assert_eq!(spec["suspend"], false);
        assert_eq!(spec["successfulJobsHistoryLimit"], 3);
        assert_eq!(spec["failedJobsHistoryLimit"], 1);
        let pod = &spec["jobTemplate"]["spec"]["template"]["spec"];
        assert_eq!(pod["dnsPolicy"], "ClusterFirst");
        assert!(spec["jobTemplate"]["spec"].get("backoffLimit").is_none());
        assert!(CronJobStrategy.validate(&cj).is_empty());
    }

    #[test]
    fn invalid_cronjobs_are_refused_with_upstreams_messages() {
        let cases: Vec<crate::strategy::common::Case<&str>> = vec![
            (
                "no schedule",
                Box::new(|c| c["spec"]["schedule"] = json!("")),
                vec!["spec.schedule: Required value"],
            ),
            (
                "a schedule with six fields",
                Box::new(|c| c["spec"]["schedule"] = json!("0 0 3 * * *")),
                vec![
                    "spec.schedule: Invalid value: \"0 0 3 * * *\": expected exactly 5 fields, found 6: [0 0 3 * * *]",
                ],
            ),
            (
                "a zone inside the schedule",
                Box::new(|c| c["spec"]["schedule"] = json!("CRON_TZ=UTC 0 3 * * *")),
                vec![
                    "spec.schedule: Invalid value: \"CRON_TZ=UTC 0 3 * * *\": cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
                ],
            ),
            (
                "an unknown time zone",
                Box::new(|c| c["spec"]["timeZone"] = json!("Mars/Olympus")),
                vec![
                    "spec.timeZone: Invalid value: \"Mars/Olympus\": unknown time zone Mars/Olympus",
                ],
            ),
            (
                "the Local time zone",
                Box::new(|c| c["spec"]["timeZone"] = json!("Local")),
                vec![
                    "spec.timeZone: Invalid value: \"Local\": timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
                ],
            ),
            (
                "an unknown concurrency policy",
                Box::new(|c| c["spec"]["concurrencyPolicy"] = json!("Sometimes")),
                vec![
                    "spec.concurrencyPolicy: Unsupported value: \"Sometimes\": supported values: \"Allow\", \"Forbid\", \"Replace\"",
                ],
            ),
            (
                "a selector in the job template",
                Box::new(|c| {
                    c["spec"]["jobTemplate"]["spec"]["selector"] =
                        json!({"matchLabels": {"a": "b"}})
                }),
                vec![
                    "spec.jobTemplate.spec.selector: Invalid value: {\"matchLabels\":{\"a\":\"b\"}}: `selector` will be auto-generated",
                ],
            ),
            (
                "pods that restart Always",
                Box::new(|c| {
                    c["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] =
                        json!("Always")
                }),
                vec![
                    "spec.jobTemplate.spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\"",
                ],
            ),
            (
                "a name too long for its Jobs",
                Box::new(|c| c["metadata"]["name"] = json!("a".repeat(53))),
                vec![
                    "metadata.name: Invalid value: \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\": must be no more than 52 characters",
                ],
            ),
        ];
        for (name, change, want) in cases {
            let mut cj = created();
            change(&mut cj);
            assert_eq!(errors(CronJobStrategy.validate(&cj)), want, "{name}");
        }
    }

    #[test]
    fn a_known_time_zone_is_accepted_and_old_tz_schedules_may_stay() {
        let mut cj = created();
        cj["spec"]["timeZone"] = json!("Europe/Berlin");
        assert!(CronJobStrategy.validate(&cj).is_empty());
        let mut old = created();
        old["spec"]["schedule"] = json!("TZ=UTC 0 3 * * *");
        let mut new = old.clone();
        new["spec"]["suspend"] = json!(true);
        assert!(CronJobStrategy.validate_update(&new, &old).is_empty());
    }
}
