//! Table tests of the Job strategy.

use super::*;

const UID: &str = "0f3c3f0e-5b1a-4a8e-9d51-5d2a3c6a7b10";

fn job(template_labels: Value) -> Value {
    json!({"metadata": {"name": "pi", "uid": UID, "generation": 1},
           "spec": {"template": {"metadata": {"labels": template_labels},
                                 "spec": {"restartPolicy": "Never",
                                          "containers": [{"name": "pi", "image": "perl:5"}]}}}})
}

fn created(template_labels: Value) -> Value {
    let mut j = job(template_labels);
    JobStrategy.prepare_for_create(&mut j);
    j
}

fn errors(errs: Vec<FieldError>) -> Vec<String> {
    errs.iter().map(ToString::to_string).collect()
}

#[test]
fn a_new_job_gets_defaults_a_generated_selector_and_its_templates_labels() {
    let j = created(Value::Null);
    let spec = &j["spec"];
    for (field, want) in [
        ("completions", json!(1)),
        ("parallelism", json!(1)),
        ("backoffLimit", json!(6)),
        ("completionMode", json!("NonIndexed")),
        ("suspend", json!(false)),
        ("podReplacementPolicy", json!("TerminatingOrFailed")),
        ("selector", json!({"matchLabels": {CONTROLLER_UID: UID}})),
    ] {
        assert_eq!(spec[field], want, "{field}");
    }
    let generated = json!({CONTROLLER_UID: UID, JOB_NAME: "pi",
                           LEGACY_CONTROLLER_UID: UID, LEGACY_JOB_NAME: "pi"});
    assert_eq!(spec["template"]["metadata"]["labels"], generated);
    assert_eq!(j["metadata"]["labels"], generated);
    assert!(
        JobStrategy.validate(&j).is_empty(),
        "{:?}",
        JobStrategy.validate(&j)
    );
}

#[test]
fn user_template_labels_are_copied_to_the_job_before_generation() {
    let j = created(json!({"app": "pi"}));
    assert_eq!(j["metadata"]["labels"], json!({"app": "pi"}));
    assert_eq!(j["spec"]["template"]["metadata"]["labels"]["app"], "pi");
}

#[test]
fn parallelism_alone_leaves_completions_unset() {
    let mut j = job(Value::Null);
    j["spec"]["parallelism"] = json!(3);
    JobStrategy.prepare_for_create(&mut j);
    assert!(j["spec"].get("completions").is_none());
    assert_eq!(j["spec"]["parallelism"], 3);
}

#[test]
fn invalid_jobs_are_refused_with_upstreams_messages() {
    let cases: Vec<crate::strategy::common::Case<String>> = vec![
        (
            "the defaulted restart policy Always",
            Box::new(|j| drop(j["spec"]["template"]["spec"].as_object_mut().unwrap().remove("restartPolicy"))),
            vec![
                "spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\"".into(),
            ],
        ),
        (
            "negative parallelism",
            Box::new(|j| j["spec"]["parallelism"] = json!(-1)),
            vec!["spec.parallelism: Invalid value: -1: must be greater than or equal to 0".into()],
        ),
        (
            "an Indexed job without completions",
            Box::new(|j| {
                j["spec"]["completionMode"] = json!("Indexed");
                j["spec"]["parallelism"] = json!(2);
            }),
            vec!["spec.completions: Required value: when completion mode is Indexed".into()],
        ),
        (
            "a manual selector that is missing",
            Box::new(|j| j["spec"]["manualSelector"] = json!(true)),
            vec![
                "spec.selector: Required value".into(),
                "spec.template.metadata.labels: Invalid value: {\"app\":\"pi\"}: `selector` does not match template `labels`".into(),
            ],
        ),
        (
            "a job-name label that is not the job's",
            Box::new(|j| j["spec"]["template"]["metadata"]["labels"]["job-name"] = json!("other")),
            vec![format!(
                "spec.template.metadata.labels[job-name]: Invalid value: {{\"app\":\"pi\",\"{CONTROLLER_UID}\":\"{UID}\",\"{JOB_NAME}\":\"pi\",\"controller-uid\":\"{UID}\",\"job-name\":\"other\"}}: must be 'pi'"
            )],
        ),
    ];
    for (name, change, want) in cases {
        let mut j = job(json!({"app": "pi"}));
        change(&mut j);
        JobStrategy.prepare_for_create(&mut j);
        assert_eq!(errors(JobStrategy.validate(&j)), want, "{name}");
    }
}

#[test]
fn the_template_and_completions_are_immutable() {
    let old = created(Value::Null);
    let mut new = old.clone();
    new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("perl:6");
    new["spec"]["completions"] = json!(2);
    let got = errors(JobStrategy.validate_update(&new, &old));
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        got[0],
        "spec.completions: Invalid value: 2: field is immutable"
    );
    assert!(
        got[1].starts_with("spec.template: Invalid value: {"),
        "{got:?}"
    );
    assert!(got[1].ends_with("}: field is immutable"), "{got:?}");
}

#[test]
fn suspended_jobs_that_never_started_may_change_scheduling_directives() {
    let mut old = job(Value::Null);
    old["spec"]["suspend"] = json!(true);
    JobStrategy.prepare_for_create(&mut old);
    let mut new = old.clone();
    new["spec"]["template"]["spec"]["nodeSelector"] = json!({"zone": "a"});
    new["spec"]["template"]["metadata"]["annotations"] = json!({"note": "x"});
    assert!(JobStrategy.validate_update(&new, &old).is_empty());
    let mut started = old.clone();
    started["status"] = json!({"startTime": "2026-01-01T00:00:00Z"});
    assert_eq!(JobStrategy.validate_update(&new, &started).len(), 1);
}

#[test]
fn indexed_jobs_scale_completions_with_parallelism() {
    let mut old = job(Value::Null);
    old["spec"]["completionMode"] = json!("Indexed");
    old["spec"]["completions"] = json!(2);
    old["spec"]["parallelism"] = json!(2);
    JobStrategy.prepare_for_create(&mut old);
    let mut both = old.clone();
    both["spec"]["completions"] = json!(4);
    both["spec"]["parallelism"] = json!(4);
    assert!(JobStrategy.validate_update(&both, &old).is_empty());
    let mut alone = old.clone();
    alone["spec"]["completions"] = json!(4);
    assert_eq!(
        errors(JobStrategy.validate_update(&alone, &old)),
        vec![
            "spec.completions: Invalid value: 4: can only be modified in tandem with spec.parallelism"
        ]
    );
}

#[test]
fn status_successful_is_the_succeeded_count() {
    assert_eq!(
        JobStrategy.fields(&json!({})),
        vec![("status.successful", "0".to_string())]
    );
    assert_eq!(
        JobStrategy.fields(&json!({"status": {"succeeded": 3}})),
        vec![("status.successful", "3".to_string())]
    );
}
