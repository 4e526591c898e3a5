//! Jobs and CronJobs (upstream's `pkg/registry/batch`): defaults, the generated selector and
//! labels of a Job, validation and tables.

use std::collections::BTreeMap;

use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::apps::{container_summary, format_labels, non_negative, selector_string};
use super::meta::{self, human_duration};
use super::pods::{defaults as pod_defaults, validation as pod_validation};
use super::strategy::{age_cell, col, name_cell, wide, Column, Strategy, AGE, NAME};
use super::workloads::default_field;
use crate::authn::UserInfo;

/// The labels a Job's pods carry (`batch/v1`'s constants).
pub(crate) const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
pub(crate) const JOB_NAME: &str = "batch.kubernetes.io/job-name";
const LEGACY_CONTROLLER_UID: &str = "controller-uid";
const LEGACY_JOB_NAME: &str = "job-name";

const MAX_INDEXED_COMPLETIONS: i64 = 100_000;

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

/// A Job's spec defaults (upstream's `SetDefaults_Job`; a CronJob's job template gets only
/// the pod defaults, as upstream).
fn job_spec_defaults(spec: &mut Value) {
    if spec.get("completions").is_none_or(Value::is_null)
        && spec.get("parallelism").is_none_or(Value::is_null)
    {
        spec["completions"] = json!(1);
        spec["parallelism"] = json!(1);
    }
    default_field(spec, "parallelism", json!(1));
    let per_index = !spec["backoffLimitPerIndex"].is_null();
    default_field(
        spec,
        "backoffLimit",
        json!(if per_index { i32::MAX as i64 } else { 6 }),
    );
    default_field(spec, "completionMode", json!("NonIndexed"));
    default_field(spec, "suspend", json!(false));
    let replacement = if spec["podFailurePolicy"].is_null() {
        "TerminatingOrFailed"
    } else {
        "Failed"
    };
    default_field(spec, "podReplacementPolicy", json!(replacement));
    // (`get_mut`, not indexing: indexing a missing field would create it.)
    let rules = spec
        .get_mut("podFailurePolicy")
        .and_then(|p| p.get_mut("rules"))
        .and_then(Value::as_array_mut);
    for rule in rules.into_iter().flatten() {
        let patterns = rule.get_mut("onPodConditions").and_then(Value::as_array_mut);
        for p in patterns.into_iter().flatten() {
            default_field(p, "status", json!("True"));
        }
    }
    if spec["template"].is_object() {
        pod_defaults::pod_spec(&mut spec["template"]["spec"]);
    }
}

/// Upstream's `generateSelector`: unless `manualSelector`, the pods carry the Job's uid and
/// name as labels and the selector is the uid label.
fn generate_selector(obj: &mut Value) {
    if obj["spec"]["manualSelector"] == true {
        return;
    }
    let uid = obj["metadata"]["uid"].clone();
    let name = obj["metadata"]["name"].clone();
    let labels = &mut obj["spec"]["template"]["metadata"]["labels"];
    if !labels.is_object() {
        *labels = json!({});
    }
    for (key, value) in [
        (LEGACY_JOB_NAME, &name),
        (JOB_NAME, &name),
        (LEGACY_CONTROLLER_UID, &uid),
        (CONTROLLER_UID, &uid),
    ] {
        if labels.get(key).is_none() {
            labels[key] = value.clone();
        }
    }
    let selector = &mut obj["spec"]["selector"];
    if !selector.is_object() {
        *selector = json!({});
    }
    if !selector["matchLabels"].is_object() {
        selector["matchLabels"] = json!({});
    }
    if selector["matchLabels"].get(CONTROLLER_UID).is_none() {
        selector["matchLabels"][CONTROLLER_UID] = uid;
    }
}

/// What a Job's and a job template's spec must be (upstream's `ValidateJobSpec`).
fn job_spec(errs: &mut Vec<FieldError>, path: &str, spec: &Value, generated: Option<&Value>) {
    for key in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
    ] {
        non_negative(errs, spec, path, key);
    }
    let indexed = spec["completionMode"] == "Indexed";
    match spec["completionMode"].as_str() {
        None | Some("NonIndexed") | Some("Indexed") => {}
        Some(m) => errs.push(FieldError::not_supported(
            format!("{path}.completionMode"),
            m,
            &["NonIndexed", "Indexed"],
        )),
    }
    if indexed {
        match spec["completions"].as_i64() {
            None => errs.push(FieldError::required(
                format!("{path}.completions"),
                "when completion mode is Indexed",
            )),
            Some(c) if c > MAX_INDEXED_COMPLETIONS => errs.push(FieldError::invalid_raw(
                format!("{path}.completions"),
                &c.to_string(),
                format!(
                    "must be less than or equal to {MAX_INDEXED_COMPLETIONS} when completion mode is Indexed"
                ),
            )),
            _ => {}
        }
    } else {
        for key in ["backoffLimitPerIndex", "maxFailedIndexes"] {
            if !spec[key].is_null() {
                errs.push(FieldError::forbidden(
                    format!("{path}.{key}"),
                    "requires indexed completion mode",
                ));
            }
        }
    }
    if !spec["maxFailedIndexes"].is_null() && spec["backoffLimitPerIndex"].is_null() {
        errs.push(FieldError::required(
            format!("{path}.backoffLimitPerIndex"),
            "when maxFailedIndexes is specified",
        ));
    }
    let template = &spec["template"];
    let selector = &spec["selector"];
    if let Some(generated) = generated {
        // A Job whose selector was generated must keep it (upstream's `ValidateGeneratedSelector`).
        if generated["spec"]["manualSelector"] != true {
            let uid = generated["metadata"]["uid"].as_str().unwrap_or("");
            if selector["matchLabels"][CONTROLLER_UID].as_str() != Some(uid) {
                errs.push(FieldError::invalid_raw(
                    format!("{path}.selector"),
                    &r8s_api::validation::go_label_selector(selector),
                    "`selector` not auto-generated",
                ));
            }
        }
    }
    if selector.is_null() {
        errs.push(FieldError::required(format!("{path}.selector"), ""));
    } else {
        let want = meta::string_map(&selector["matchLabels"]);
        let have = meta::string_map(&template["metadata"]["labels"]);
        if !want.iter().all(|(k, v)| have.get(k) == Some(v)) {
            errs.push(FieldError::invalid(
                format!("{path}.template.metadata.labels"),
                &format_labels(&have),
                "`selector` does not match template `labels`",
            ));
        }
    }
    pod_validation::pod_spec(errs, &format!("{path}.template.spec"), &template["spec"]);
    match template["spec"]["restartPolicy"].as_str().unwrap_or("") {
        "OnFailure" | "Never" => {}
        "Always" | "" => errs.push(FieldError::required(
            format!("{path}.template.spec.restartPolicy"),
            "valid values: \"OnFailure\", \"Never\"",
        )),
        p => errs.push(FieldError::not_supported(
            format!("{path}.template.spec.restartPolicy"),
            p,
            &["OnFailure", "Never"],
        )),
    }
    if !spec["podFailurePolicy"].is_null() && template["spec"]["restartPolicy"] != "Never" {
        errs.push(FieldError::invalid(
            format!("{path}.template.spec.restartPolicy"),
            template["spec"]["restartPolicy"].as_str().unwrap_or(""),
            "only \"Never\" is supported when podFailurePolicy is specified",
        ));
    }
}

/// A Job's template without what may change on update: nothing, except a suspended Job that
/// never started may change its pods' scheduling directives, labels and annotations
/// (upstream's `JobMutableSchedulingDirectives`).
fn fixed_template(job: &Value, mutable_scheduling: bool) -> Value {
    let mut t = job["spec"]["template"].clone();
    if mutable_scheduling {
        if let Some(o) = t["spec"].as_object_mut() {
            for key in ["nodeSelector", "tolerations", "affinity", "schedulingGates"] {
                o.remove(key);
            }
        }
        if let Some(o) = t["metadata"].as_object_mut() {
            o.remove("labels");
            o.remove("annotations");
        }
    }
    t
}

/// Jobs.
pub(crate) struct Jobs;

impl Strategy for Jobs {
    fn canonicalize_quantities(&self, obj: &mut Value) -> Result<(), &'static str> {
        let template = obj
            .get_mut("spec")
            .and_then(|s| s.get_mut("template"))
            .and_then(|t| t.get_mut("spec"));
        super::quantities::pod_spec(template)
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn status_subresource(&self) -> bool {
        true
    }

    fn default(&self, obj: &mut Value) {
        if !obj["spec"].is_object() {
            return;
        }
        job_spec_defaults(&mut obj["spec"]);
        default_field(&mut obj["spec"], "manualSelector", json!(false));
        // The Job's own labels default to its pods' (before the generated ones are added).
        let labels = obj["spec"]["template"]["metadata"]["labels"].clone();
        if labels.is_object() && obj["metadata"]["labels"].as_object().is_none_or(|l| l.is_empty()) {
            obj["metadata"]["labels"] = labels;
        }
    }

    fn prepare_for_create(&self, _user: &UserInfo, obj: &mut Value) {
        obj["status"] = json!({});
        if obj["spec"].is_object() {
            generate_selector(obj);
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        job_spec(&mut errs, "spec", &obj["spec"], Some(obj));
        errs
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let (spec, was) = (&obj["spec"], &old["spec"]);
        if spec["selector"] != was["selector"] {
            errs.push(FieldError::invalid_raw(
                "spec.selector",
                &r8s_api::validation::go_label_selector(&spec["selector"]),
                "field is immutable",
            ));
        }
        let mutable_scheduling = was["suspend"] == true && old["status"]["startTime"].is_null();
        if fixed_template(obj, mutable_scheduling) != fixed_template(old, mutable_scheduling) {
            errs.push(FieldError::invalid_raw(
                "spec.template",
                "core.PodTemplateSpec{...}",
                "field is immutable",
            ));
        }
        if spec["completionMode"] != was["completionMode"] {
            errs.push(FieldError::invalid(
                "spec.completionMode",
                spec["completionMode"].as_str().unwrap_or(""),
                "field is immutable",
            ));
        }
        if spec["completions"] != was["completions"] {
            // Only an Indexed Job's completions may change, together with its parallelism.
            let value = int(&spec["completions"]).to_string();
            if spec["completionMode"] != "Indexed" {
                errs.push(FieldError::invalid_raw(
                    "spec.completions",
                    &value,
                    "field is immutable",
                ));
            } else if spec["completions"] != spec["parallelism"] {
                errs.push(FieldError::invalid_raw(
                    "spec.completions",
                    &value,
                    "can only be modified in tandem with spec.parallelism",
                ));
            }
        }
        errs
    }

    fn fields(&self, obj: &Value, f: &mut BTreeMap<String, String>) {
        f.insert(
            "status.successful".into(),
            int(&obj["status"]["succeeded"]).to_string(),
        );
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("Status", "string", "Status of the job."),
            col("Completions", "string", "The number of pods which reached phase Succeeded. The value increases monotonically for a given spec. However, it may decrease in reaction to scale down of elastic indexed jobs."),
            col("Duration", "string", "Time required to complete the job."),
            AGE,
            wide("Containers", "Names of each container in the template."),
            wide("Images", "Images referenced by each container in the template."),
            wide("Selector", "A label query over pods that should match the pod count. Normally, the system sets this field for you. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let (spec, status) = (&obj["spec"], &obj["status"]);
        let (containers, images) = container_summary(&spec["template"]["spec"]);
        let succeeded = int(&status["succeeded"]);
        let completions = match (spec["completions"].as_i64(), int(&spec["parallelism"])) {
            (Some(c), _) => format!("{succeeded}/{c}"),
            (None, p) if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        };
        // Seconds since each time: their difference is the run's length.
        let ago = |k: &str| status[k].as_str().and_then(meta::age_seconds);
        let duration = match (ago("startTime"), ago("completionTime")) {
            (Some(start), Some(end)) => human_duration(start - end),
            (Some(start), None) => human_duration(start),
            _ => String::new(),
        };
        vec![
            name_cell(obj),
            json!(job_status(obj)),
            json!(completions),
            json!(duration),
            age_cell(obj),
            json!(containers),
            json!(images),
            json!(selector_string(&spec["selector"])),
        ]
    }
}

/// The Status column of a Job (upstream's printer).
fn job_status(obj: &Value) -> &'static str {
    // As upstream, the first condition of a type decides.
    let has = |t: &str| {
        obj["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == t)
            .is_some_and(|c| c["status"] == "True")
    };
    if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if obj["metadata"]["deletionTimestamp"].is_string() {
        "Terminating"
    } else if has("Suspended") {
        "Suspended"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    }
}

/// CronJobs.
pub(crate) struct CronJobs;

impl Strategy for CronJobs {
    fn canonicalize_quantities(&self, obj: &mut Value) -> Result<(), &'static str> {
        let template = obj
            .get_mut("spec")
            .and_then(|s| s.get_mut("jobTemplate"))
            .and_then(|s| s.get_mut("spec"))
            .and_then(|s| s.get_mut("template"))
            .and_then(|t| t.get_mut("spec"));
        super::quantities::pod_spec(template)
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn status_subresource(&self) -> bool {
        true
    }

    fn prepare_for_create(&self, _user: &UserInfo, obj: &mut Value) {
        super::strategy::drop_status(obj);
        obj["status"] = json!({});
    }

    fn default(&self, obj: &mut Value) {
        let spec = &mut obj["spec"];
        if !spec.is_object() {
            return;
        }
        default_field(spec, "concurrencyPolicy", json!("Allow"));
        default_field(spec, "suspend", json!(false));
        default_field(spec, "successfulJobsHistoryLimit", json!(3));
        default_field(spec, "failedJobsHistoryLimit", json!(1));
        let template = spec
            .get_mut("jobTemplate")
            .and_then(|t| t.get_mut("spec"))
            .and_then(|s| s.get_mut("template"))
            .filter(|t| t.is_object());
        if let Some(template) = template {
            pod_defaults::pod_spec(&mut template["spec"]);
        }
    }

    fn validate_name(&self, name: &str) -> Vec<String> {
        // Its Jobs are named `<name>-<minutes since the epoch>` (11 characters more) and must
        // still fit a label value.
        let mut errs = r8s_api::validation::dns1123_subdomain(name);
        if name.len() > 52 {
            errs.push("must be no more than 52 characters".into());
        }
        errs
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let spec = &obj["spec"];
        match spec["schedule"].as_str() {
            None | Some("") => errs.push(FieldError::required("spec.schedule", "")),
            Some(s) if s.contains("TZ") && !spec["timeZone"].is_null() => errs.push(FieldError::invalid(
                "spec.schedule",
                s,
                "cannot use both timeZone field and TZ or CRON_TZ in schedule",
            )),
            Some(s) if s.contains("TZ") => errs.push(FieldError::invalid(
                "spec.schedule",
                s,
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            )),
            Some(s) => {
                if let Err(e) = r8s_api::cron::Schedule::parse(s) {
                    errs.push(FieldError::invalid("spec.schedule", s, e));
                }
            }
        }
        if let Some(tz) = spec["timeZone"].as_str() {
            let problem = if tz.is_empty() {
                Some("timeZone must be nil or non-empty string".to_owned())
            } else if tz.eq_ignore_ascii_case("Local") {
                Some(
                    "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones"
                        .to_owned(),
                )
            } else if !r8s_api::cron::known_time_zone(tz) {
                Some(format!("unknown time zone {tz}"))
            } else {
                None
            };
            if let Some(p) = problem {
                errs.push(FieldError::invalid("spec.timeZone", tz, p));
            }
        }
        match spec["concurrencyPolicy"].as_str().unwrap_or("") {
            "Allow" | "Forbid" | "Replace" => {}
            p => errs.push(FieldError::not_supported(
                "spec.concurrencyPolicy",
                p,
                &["Allow", "Forbid", "Replace"],
            )),
        }
        for key in [
            "startingDeadlineSeconds",
            "successfulJobsHistoryLimit",
            "failedJobsHistoryLimit",
        ] {
            non_negative(&mut errs, spec, "spec", key);
        }
        let job = &spec["jobTemplate"]["spec"];
        if !job["selector"].is_null() {
            errs.push(FieldError::invalid_raw(
                "spec.jobTemplate.spec.selector",
                &r8s_api::validation::go_label_selector(&job["selector"]),
                "`selector` will be auto-generated",
            ));
        }
        if job["manualSelector"] == true {
            errs.push(FieldError::not_supported(
                "spec.jobTemplate.spec.manualSelector",
                "true",
                &["nil", "false"],
            ));
        }
        job_spec(&mut errs, "spec.jobTemplate.spec", &without_selector(job), None);
        errs
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("Schedule", "string", "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron."),
            col("Timezone", "string", "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones. If not specified, this will default to the time zone of the kube-controller-manager process. The set of valid time zone names and the time zone offset is loaded from the system-wide time zone database by the API server during CronJob validation and the controller manager during execution. If no system-wide time zone database can be found a bundled version of the database is used instead. If the time zone name becomes invalid during the lifetime of a CronJob or due to a change in host configuration, the controller will stop creating new new Jobs and will create a system event with the reason UnknownTimeZone. More information can be found in https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/#time-zones"),
            col("Suspend", "boolean", "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.  Defaults to false."),
            col("Active", "integer", "A list of pointers to currently running jobs."),
            col("Last Schedule", "string", "Information when was the last time the job was successfully scheduled."),
            AGE,
            wide("Containers", "Names of each container in the template."),
            wide("Images", "Images referenced by each container in the template."),
            wide("Selector", "A label query over pods that should match the pod count. Normally, the system sets this field for you. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors"),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let (spec, status) = (&obj["spec"], &obj["status"]);
        let job = &spec["jobTemplate"]["spec"];
        let (containers, images) = container_summary(&job["template"]["spec"]);
        let last = status["lastScheduleTime"]
            .as_str()
            .map(|t| meta::human_age(Some(t)))
            .unwrap_or_else(|| "<none>".into());
        vec![
            name_cell(obj),
            json!(spec["schedule"].as_str().unwrap_or("")),
            json!(spec["timeZone"].as_str().unwrap_or("<none>")),
            json!(match spec["suspend"].as_bool() {
                Some(true) => "True",
                Some(false) => "False",
                None => "<unset>",
            }),
            json!(status["active"].as_array().map_or(0, Vec::len)),
            json!(last),
            age_cell(obj),
            json!(containers),
            json!(images),
            json!(selector_string(&job["selector"])),
        ]
    }
}

/// A job template as validated: its selector is generated per Job, so a template without one
/// is checked as if it selected its own labels.
fn without_selector(job: &Value) -> Value {
    let mut job = job.clone();
    if job["selector"].is_null() && job.is_object() {
        job["selector"] = json!({"matchLabels": job["template"]["metadata"]["labels"].clone()});
        if job["selector"]["matchLabels"].is_null() {
            job["selector"]["matchLabels"] = json!({});
        }
    }
    job
}
