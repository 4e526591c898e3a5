//! `PodSecurity` (upstream's Pod Security Admission, on by default): pods are checked against
//! the Pod Security Standards — `privileged` (anything goes), `baseline` (no known privilege
//! escalations) and `restricted` (hardened) — at the level their namespace's labels name:
//!
//! - `pod-security.kubernetes.io/enforce`: a violating pod is refused (403);
//! - `pod-security.kubernetes.io/audit`: a violation is recorded as the audit annotation
//!   `pod-security.kubernetes.io/audit-violations`;
//! - `pod-security.kubernetes.io/warn`: the client gets a warning;
//!
//! each with a `-version` label (`latest` or `v1.X`, default `latest`). Unlabelled modes are
//! `privileged:latest` (upstream's default configuration; no exemptions are configured).
//! Workload objects with a pod template (Deployments, ReplicaSets, …) are only audited and warned
//! about, never refused: their pods are checked when they are created. Namespaces with an
//! invalid level or version label are refused, and raising a namespace's enforce level warns
//! about the existing pods that would violate it.
//!
//! The checks and their messages are upstream's (`k8s.io/pod-security-admission/policy`, as of
//! Kubernetes 1.33), evaluated in upstream's order: baseline checks, then restricted ones, each
//! sorted by check ID, with the baseline checks a restricted one replaces left out.
//!
//! Versions: a `v1.X` label selects the checks as upstream had them in 1.X, where upstream's
//! checks differ by version (a check only exists from the version that introduced it — e.g.
//! `runAsUser` from 1.23, restricted capabilities from 1.22, restricted seccomp from 1.19; the
//! sysctl and SELinux type allow-lists grew in 1.27, 1.29, 1.31 and 1.32; seccomp was checked on
//! annotations before 1.19; Windows pods are exempt from the Linux-only restricted checks from
//! 1.25). Versions newer than 1.33, and `latest`, get the current checks.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use r8s_api::validation::FieldError;

use serde_json::{json, Value};

use super::{Attributes, Operation, ValidatingPlugin};
use crate::registry::meta;
use crate::status::ApiError;

mod checks;

pub use checks::{describe, evaluate, reasons, PodView, Violation};

pub const ENFORCE_LEVEL_LABEL: &str = "pod-security.kubernetes.io/enforce";
pub const ENFORCE_VERSION_LABEL: &str = "pod-security.kubernetes.io/enforce-version";
pub const AUDIT_LEVEL_LABEL: &str = "pod-security.kubernetes.io/audit";
pub const AUDIT_VERSION_LABEL: &str = "pod-security.kubernetes.io/audit-version";
pub const WARN_LEVEL_LABEL: &str = "pod-security.kubernetes.io/warn";
pub const WARN_VERSION_LABEL: &str = "pod-security.kubernetes.io/warn-version";

/// At most this many existing pods are checked when a namespace's enforce level is raised, and
/// for at most this long (upstream's defaults).
const NAMESPACE_MAX_PODS_TO_CHECK: usize = 3000;
const NAMESPACE_POD_CHECK_TIMEOUT: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------------------------------------
// Levels, versions and the policy a namespace's labels give
// ---------------------------------------------------------------------------------------------

/// A Pod Security Standard, in order of strictness.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "privileged" => Some(Level::Privileged),
            "baseline" => Some(Level::Baseline),
            "restricted" => Some(Level::Restricted),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy version: `latest` or `v1.X`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    Latest,
    Minor(u64),
}

impl Version {
    /// `latest`, or `v1.X` with X a number without leading zeros (upstream's
    /// `^v1\.([0-9]|[1-9][0-9]*)$`).
    pub fn parse(s: &str) -> Option<Version> {
        if s == "latest" {
            return Some(Version::Latest);
        }
        let minor = s.strip_prefix("v1.")?;
        if minor.is_empty()
            || !minor.bytes().all(|b| b.is_ascii_digit())
            || (minor.len() > 1 && minor.starts_with('0'))
        {
            return None;
        }
        minor.parse().ok().map(Version::Minor)
    }

    /// The minor version the checks are chosen by; `latest` is newer than any.
    fn minor(self) -> u64 {
        match self {
            Version::Latest => u64::MAX,
            Version::Minor(m) => m,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::Latest => f.write_str("latest"),
            Version::Minor(m) => write!(f, "v1.{m}"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LevelVersion {
    pub level: Level,
    pub version: Version,
}

impl LevelVersion {
    pub const PRIVILEGED: LevelVersion = LevelVersion {
        level: Level::Privileged,
        version: Version::Latest,
    };
}

impl fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.level, self.version)
    }
}

/// What a namespace asks for in each mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub enforce: LevelVersion,
    pub audit: LevelVersion,
    pub warn: LevelVersion,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            enforce: LevelVersion::PRIVILEGED,
            audit: LevelVersion::PRIVILEGED,
            warn: LevelVersion::PRIVILEGED,
        }
    }
}

impl Policy {
    /// The policy a namespace's labels give, and what is wrong with them. As upstream, a policy
    /// is always returned: an invalid enforce level counts as `restricted` (fail closed), an
    /// invalid audit or warn level as `privileged` (fail open), an invalid version as `latest`.
    /// A warn level defaults to an explicitly set, stricter enforce level (and its version).
    pub fn from_labels(labels: &Value) -> (Policy, Vec<FieldError>) {
        let mut p = Policy::default();
        let mut errs = Vec::new();
        let enforce_level = level_label(labels, ENFORCE_LEVEL_LABEL, &mut errs);
        if let Some(l) = enforce_level {
            p.enforce.level = l.unwrap_or(Level::Restricted);
        }
        if let Some(v) = version_label(labels, ENFORCE_VERSION_LABEL, &mut errs) {
            p.enforce.version = v;
        }
        if let Some(l) = level_label(labels, AUDIT_LEVEL_LABEL, &mut errs) {
            p.audit.level = l.unwrap_or(Level::Privileged);
        }
        if let Some(v) = version_label(labels, AUDIT_VERSION_LABEL, &mut errs) {
            p.audit.version = v;
        }
        let warn_level = level_label(labels, WARN_LEVEL_LABEL, &mut errs);
        if let Some(l) = warn_level {
            p.warn.level = l.unwrap_or(Level::Privileged);
        }
        let warn_version = version_label(labels, WARN_VERSION_LABEL, &mut errs);
        if let Some(v) = warn_version {
            p.warn.version = v;
        }
        if warn_level.is_none() && matches!(enforce_level, Some(Some(_))) && p.enforce.level > p.warn.level {
            p.warn.level = p.enforce.level;
            if warn_version.is_none() {
                p.warn.version = p.enforce.version;
            }
        }
        (p, errs)
    }

    fn fully_privileged(&self) -> bool {
        [self.enforce, self.audit, self.warn]
            .iter()
            .all(|lv| lv.level == Level::Privileged)
    }
}

/// The level a label names: `None` if it is not set, `Some(None)` if it is invalid (recorded in
/// `errs`).
fn level_label(labels: &Value, key: &str, errs: &mut Vec<FieldError>) -> Option<Option<Level>> {
    let value = labels.get(key)?.as_str().unwrap_or("");
    let level = Level::parse(value);
    if level.is_none() {
        errs.push(FieldError::invalid(
            format!("metadata.labels[{key}]"),
            value,
            "must be one of privileged, baseline, restricted",
        ));
    }
    Some(level)
}

/// The version a label names, `latest` if it is invalid (recorded in `errs`).
fn version_label(labels: &Value, key: &str, errs: &mut Vec<FieldError>) -> Option<Version> {
    let value = labels.get(key)?.as_str().unwrap_or("");
    Some(Version::parse(value).unwrap_or_else(|| {
        errs.push(FieldError::invalid(
            format!("metadata.labels[{key}]"),
            value,
            "must be \"latest\" or \"v1.x\"",
        ));
        Version::Latest
    }))
}

// ---------------------------------------------------------------------------------------------
// The admission plugin
// ---------------------------------------------------------------------------------------------

/// Pod subresources that cannot change what is checked (upstream's list). Any other pod
/// subresource carrying a pod is checked.
const IGNORED_POD_SUBRESOURCES: &[&str] = &[
    "exec",
    "attach",
    "binding",
    "eviction",
    "log",
    "portforward",
    "proxy",
    "status",
];

/// Where the pod template sits in each workload kind upstream checks (those the catalogue does
/// not serve yet are checked as soon as it does).
fn pod_template_path(group: &str, resource: &str) -> Option<&'static [&'static str]> {
    match (group, resource) {
        ("", "podtemplates") => Some(&["template"]),
        ("", "replicationcontrollers")
        | ("apps", "replicasets" | "deployments" | "statefulsets" | "daemonsets")
        | ("batch", "jobs") => Some(&["spec", "template"]),
        ("batch", "cronjobs") => Some(&["spec", "jobTemplate", "spec", "template"]),
        _ => None,
    }
}

pub struct PodSecurity {
    pub listers: super::listers::Listers,
}

impl PodSecurity {
    async fn namespace(&self, name: &str) -> Result<Option<std::sync::Arc<Value>>, String> {
        self.listers.namespace(name).await.map_err(|e| e.message)
    }

    async fn validate_namespace(&self, attrs: &Attributes<'_>) -> Result<(), ApiError> {
        if !attrs.request.subresource.is_empty() {
            return Ok(());
        }
        let Some(ns) = attrs.object.as_deref() else {
            return Ok(());
        };
        let def = crate::registry::catalogue::builtin("", "v1", "namespaces")
            .expect("namespaces are in the catalogue");
        let name = meta::name(ns);
        let (policy, errs) = Policy::from_labels(&ns["metadata"]["labels"]);
        let Some(old) = attrs.old_object.filter(|_| attrs.operation == Operation::Update) else {
            // A new namespace must have valid labels.
            if !errs.is_empty() {
                return Err(crate::registry::invalid(def, name, &errs));
            }
            return Ok(());
        };
        let (old_policy, old_errs) = Policy::from_labels(&old["metadata"]["labels"]);
        // An update must have valid labels if it changed invalid ones.
        if !errs.is_empty() && (old_errs.is_empty() || errs != old_errs) {
            return Err(crate::registry::invalid(def, name, &errs));
        }
        // Check the existing pods only when the enforce level really became stricter.
        let (new, old) = (policy.enforce, old_policy.enforce);
        if new == old
            || new.level == Level::Privileged
            || (new.version == old.version && new.level <= old.level)
        {
            return Ok(());
        }
        for w in self.check_existing_pods(name, new).await {
            attrs.warnings.add(w);
        }
        Ok(())
    }

    /// Warnings about the pods in `namespace` that violate a new enforce level (upstream's
    /// `EvaluatePodsInNamespace`): one warning per distinct set of reasons, naming the first pod
    /// (by name) and how many others share it. One pod per controller is checked first.
    async fn check_existing_pods(&self, namespace: &str, enforce: LevelVersion) -> Vec<String> {
        let deadline = Instant::now() + NAMESPACE_POD_CHECK_TIMEOUT;
        let Ok(pods) = self.listers.pods(namespace).await else {
            return vec!["failed to list pods while checking new PodSecurity enforce level".into()];
        };
        // One pod per controller first, then the others.
        let mut seen_controllers = HashSet::new();
        let (mut first, mut rest) = (Vec::new(), Vec::new());
        for pod in &pods {
            let controller = pod["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["controller"] == true)
                .and_then(|r| r["uid"].as_str());
            match controller {
                Some(uid) if !seen_controllers.insert(uid) => rest.push(pod),
                _ => first.push(pod),
            }
        }
        first.extend(rest);
        let total = first.len();
        first.truncate(NAMESPACE_MAX_PODS_TO_CHECK);
        let mut checked = first.len();

        // reasons -> (lexically first pod name, count), in order of first appearance
        let mut order: Vec<String> = Vec::new();
        let mut counts: HashMap<String, (String, usize)> = HashMap::new();
        for (i, pod) in first.iter().enumerate() {
            let violations = evaluate(enforce, &PodView::of(pod));
            if !violations.is_empty() {
                let key = reasons(&violations);
                let name = meta::name(pod).to_owned();
                match counts.get_mut(&key) {
                    Some((first_name, n)) => {
                        if name < *first_name {
                            *first_name = name;
                        }
                        *n += 1;
                    }
                    None => {
                        order.push(key.clone());
                        counts.insert(key, (name, 1));
                    }
                }
            }
            if Instant::now() > deadline {
                checked = i + 1;
                break;
            }
        }
        let mut warnings = Vec::new();
        if checked < total {
            warnings.push(format!(
                "new PodSecurity enforce level only checked against the first {checked} of {total} existing pods"
            ));
        }
        if !order.is_empty() {
            warnings.push(format!(
                "existing pods in namespace \"{namespace}\" violate the new PodSecurity enforce level \"{enforce}\""
            ));
        }
        let mut pod_warnings: Vec<String> = order
            .into_iter()
            .map(|reasons| {
                let (name, n) = &counts[&reasons];
                match n {
                    1 => format!("{name}: {reasons}"),
                    2 => format!("{name} (and 1 other pod): {reasons}"),
                    n => format!("{name} (and {} other pods): {reasons}", n - 1),
                }
            })
            .collect();
        pod_warnings.sort();
        warnings.extend(pod_warnings);
        warnings
    }

    async fn validate_pod(&self, attrs: &Attributes<'_>) -> Result<(), ApiError> {
        if IGNORED_POD_SUBRESOURCES.contains(&attrs.request.subresource.as_str()) {
            return Ok(());
        }
        let Some(pod) = attrs.object.as_deref() else {
            return Ok(());
        };
        if pod["kind"].as_str().is_some_and(|k| k != "Pod") {
            // A subresource carrying something else (upstream fails to decode it as a pod).
            return Ok(());
        }
        let namespace = object_namespace(attrs, pod);
        let ns = match self.namespace(&namespace).await {
            Ok(Some(ns)) => ns,
            Ok(None) => {
                return Err(ApiError::internal(format!(
                    "failed to lookup namespace \"{namespace}\""
                )))
            }
            Err(e) => {
                tracing::error!(%namespace, error = %e, "admission: PodSecurity could not read the pod's namespace");
                return Err(ApiError::internal(format!(
                    "failed to lookup namespace \"{namespace}\""
                )));
            }
        };
        let (policy, errs) = Policy::from_labels(&ns["metadata"]["labels"]);
        if errs.is_empty() && policy.fully_privileged() {
            return Ok(());
        }
        if let Some(old) = attrs.old_object.filter(|_| attrs.operation == Operation::Update) {
            if !significant_pod_update(pod, old) {
                return Ok(());
            }
        }
        self.check(attrs, &namespace, &policy, &errs, &PodView::of(pod), true)
    }

    async fn validate_pod_controller(&self, attrs: &Attributes<'_>, path: &[&str]) -> Result<(), ApiError> {
        if !attrs.request.subresource.is_empty() {
            return Ok(());
        }
        let Some(obj) = attrs.object.as_deref() else {
            return Ok(());
        };
        let namespace = object_namespace(attrs, obj);
        // A workload is never refused for this (upstream records it as an audit annotation).
        let ns = match self.namespace(&namespace).await {
            Ok(Some(ns)) => ns,
            Ok(None) => return Ok(()),
            Err(e) => {
                tracing::info!(%namespace, error = %e, "admission: PodSecurity could not read a workload's namespace");
                return Ok(());
            }
        };
        let (policy, errs) = Policy::from_labels(&ns["metadata"]["labels"]);
        if errs.is_empty()
            && policy.warn.level == Level::Privileged
            && policy.audit.level == Level::Privileged
        {
            return Ok(());
        }
        let template = path.iter().fold(obj, |v, k| &v[*k]);
        if template.is_null() {
            return Ok(());
        }
        self.check(attrs, &namespace, &policy, &errs, &PodView::of(template), false)
    }

    /// Check a pod (or template) in each mode: enforce (pods only), audit, warn.
    fn check(
        &self,
        attrs: &Attributes<'_>,
        namespace: &str,
        policy: &Policy,
        label_errs: &[FieldError],
        pod: &PodView<'_>,
        enforce: bool,
    ) -> Result<(), ApiError> {
        let r = attrs.request;
        let name = attrs
            .object
            .as_deref()
            .map(meta::name)
            .filter(|n| !n.is_empty())
            .unwrap_or(r.name.as_str());
        if !label_errs.is_empty() {
            let errs: Vec<String> = label_errs.iter().map(ToString::to_string).collect();
            tracing::debug!(%namespace, error = %format!("Failed to parse policy: {}", errs.join(", ")), "admission: PodSecurity namespace labels are invalid");
        }
        let mut results: Vec<(LevelVersion, Vec<Violation>)> = Vec::new();
        let mut result = |lv: LevelVersion| -> Vec<Violation> {
            if let Some((_, v)) = results.iter().find(|(l, _)| *l == lv) {
                return v.clone();
            }
            let v = evaluate(lv, pod);
            results.push((lv, v.clone()));
            v
        };
        let mut refusal = None;
        if enforce {
            let violations = result(policy.enforce);
            if !violations.is_empty() {
                refusal = Some(
                    ApiError::forbidden(format!(
                        "{} \"{name}\" is forbidden: violates PodSecurity \"{}\": {}",
                        r.resource,
                        policy.enforce,
                        describe(&violations)
                    ))
                    .with_details(json!({"name": name, "kind": r.resource})),
                );
            }
        }
        let violations = result(policy.audit);
        if !violations.is_empty() {
            // There is no audit log yet: the audit annotation upstream records is logged instead.
            tracing::info!(
                %namespace,
                %name,
                resource = %r.resource,
                "pod-security.kubernetes.io/audit-violations" = %format!(
                    "would violate PodSecurity \"{}\": {}",
                    policy.audit,
                    describe(&violations)
                ),
                "admission: PodSecurity audit"
            );
        }
        if let Some(refusal) = refusal {
            // No warnings on a request that is refused anyway.
            return Err(refusal);
        }
        let violations = result(policy.warn);
        if !violations.is_empty() {
            attrs.warnings.add(format!(
                "would violate PodSecurity \"{}\": {}",
                policy.warn,
                describe(&violations)
            ));
        }
        Ok(())
    }
}

fn object_namespace(attrs: &Attributes<'_>, obj: &Value) -> String {
    match meta::namespace(obj) {
        "" => attrs.request.namespace.clone(),
        ns => ns.to_owned(),
    }
}

/// Whether a pod update can change the outcome (upstream's `isSignificantPodUpdate`): only
/// container images may change on an existing pod, and ephemeral containers may be added.
fn significant_pod_update(pod: &Value, old: &Value) -> bool {
    fn list<'a>(pod: &'a Value, key: &str) -> &'a [Value] {
        pod["spec"][key].as_array().map(Vec::as_slice).unwrap_or(&[])
    }
    for k in ["containers", "initContainers"] {
        let (new, old) = (list(pod, k), list(old, k));
        if new.len() != old.len() || new.iter().zip(old).any(|(n, o)| n["image"] != o["image"]) {
            return true;
        }
    }
    let old_ephemeral = list(old, "ephemeralContainers");
    list(pod, "ephemeralContainers").iter().any(|c| {
        match old_ephemeral.iter().find(|o| o["name"] == c["name"]) {
            None => true,
            Some(o) => o["image"] != c["image"],
        }
    })
}

#[async_trait]
impl ValidatingPlugin for PodSecurity {
    fn name(&self) -> &'static str {
        "PodSecurity"
    }

    async fn validate(&self, attrs: &Attributes<'_>) -> Result<(), ApiError> {
        if !matches!(attrs.operation, Operation::Create | Operation::Update) {
            return Ok(());
        }
        let r = attrs.request;
        match (r.api_group.as_str(), r.resource.as_str()) {
            ("", "namespaces") => self.validate_namespace(attrs).await,
            ("", "pods") => self.validate_pod(attrs).await,
            (group, resource) => match pod_template_path(group, resource) {
                Some(path) => self.validate_pod_controller(attrs, path).await,
                None => Ok(()),
            },
        }
    }
}
#[cfg(test)]
mod tests {
    use super::checks::tests::restricted_pod;
    use super::*;
    use crate::admission::Warnings;
    use crate::authn::UserInfo;
    use crate::request_info::parse_request;
    use r8s_store::Store;
    use std::sync::Arc;

    fn lv(s: &str) -> LevelVersion {
        let (level, version) = s.split_once(':').unwrap();
        LevelVersion {
            level: Level::parse(level).unwrap(),
            version: Version::parse(version).unwrap(),
        }
    }

    #[test]
    fn levels_and_versions_parse_as_upstream() {
        assert_eq!(Level::parse("baseline"), Some(Level::Baseline));
        assert_eq!(Level::parse("Baseline"), None);
        assert_eq!(Version::parse("latest"), Some(Version::Latest));
        assert_eq!(Version::parse("v1.0"), Some(Version::Minor(0)));
        assert_eq!(Version::parse("v1.25"), Some(Version::Minor(25)));
        for bad in ["", "v1.", "v1.025", "v2.1", "1.25", "v1.2x", "v1.-1", "LATEST"] {
            assert_eq!(Version::parse(bad), None, "{bad}");
        }
        assert_eq!(lv("restricted:v1.25").to_string(), "restricted:v1.25");
        assert_eq!(lv("baseline:latest").to_string(), "baseline:latest");
    }

    #[test]
    fn policy_from_namespace_labels() {
        let (p, errs) = Policy::from_labels(&Value::Null);
        assert_eq!((p, errs.len()), (Policy::default(), 0));
        assert!(p.fully_privileged());

        // warn follows an explicitly set, stricter enforce level (and its version).
        let (p, errs) = Policy::from_labels(&json!({
            ENFORCE_LEVEL_LABEL: "restricted", ENFORCE_VERSION_LABEL: "v1.25", AUDIT_LEVEL_LABEL: "baseline"
        }));
        assert!(errs.is_empty());
        assert_eq!(p.enforce, lv("restricted:v1.25"));
        assert_eq!(p.audit, lv("baseline:latest"));
        assert_eq!(p.warn, lv("restricted:v1.25"));
        let (p, _) = Policy::from_labels(&json!({
            ENFORCE_LEVEL_LABEL: "restricted", WARN_LEVEL_LABEL: "baseline", WARN_VERSION_LABEL: "v1.30"
        }));
        assert_eq!(p.warn, lv("baseline:v1.30"));
        let (p, _) =
            Policy::from_labels(&json!({ENFORCE_LEVEL_LABEL: "baseline", WARN_VERSION_LABEL: "v1.30"}));
        assert_eq!(p.warn, lv("baseline:v1.30"));

        // Invalid values: enforce fails closed, audit and warn fail open, versions are latest.
        let (p, errs) = Policy::from_labels(&json!({
            ENFORCE_LEVEL_LABEL: "strict", ENFORCE_VERSION_LABEL: "1.25",
            AUDIT_LEVEL_LABEL: "x", WARN_LEVEL_LABEL: "y"
        }));
        assert_eq!(p.enforce, lv("restricted:latest"));
        assert_eq!(p.audit, lv("privileged:latest"));
        assert_eq!(p.warn, lv("privileged:latest"));
        let errs: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(
            errs,
            [
                "metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": must be one of privileged, baseline, restricted",
                "metadata.labels[pod-security.kubernetes.io/enforce-version]: Invalid value: \"1.25\": must be \"latest\" or \"v1.x\"",
                "metadata.labels[pod-security.kubernetes.io/audit]: Invalid value: \"x\": must be one of privileged, baseline, restricted",
                "metadata.labels[pod-security.kubernetes.io/warn]: Invalid value: \"y\": must be one of privileged, baseline, restricted",
            ]
        );
        // An invalid enforce level does not make warn follow it.
        let (p, _) = Policy::from_labels(&json!({ENFORCE_LEVEL_LABEL: "strict"}));
        assert_eq!(p.warn.level, Level::Privileged);
    }
    #[test]
    fn pod_updates_that_matter() {
        let old = json!({"spec": {"containers": [{"name": "c", "image": "a"}], "ephemeralContainers": [{"name": "e", "image": "x"}]}});
        let mut new = old.clone();
        new["metadata"] = json!({"labels": {"x": "y"}});
        new["spec"]["activeDeadlineSeconds"] = json!(5);
        assert!(!significant_pod_update(&new, &old));
        new["spec"]["containers"][0]["image"] = json!("b");
        assert!(significant_pod_update(&new, &old));
        let mut new = old.clone();
        new["spec"]["ephemeralContainers"] =
            json!([{"name": "e", "image": "x"}, {"name": "f", "image": "x"}]);
        assert!(significant_pod_update(&new, &old));
    }

    // The plugin against a store -----------------------------------------------------------

    async fn store_with(objects: &[(&str, Value)]) -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let s =
            r8s_store::embedded::EmbeddedStore::open(r8s_store::embedded::EmbeddedOptions::new(dir.path()))
                .unwrap();
        for (key, obj) in objects {
            s.create(key, serde_json::to_vec(obj).unwrap().into())
                .await
                .unwrap();
        }
        (dir, Arc::new(s))
    }

    fn namespace(name: &str, labels: Value) -> (String, Value) {
        (
            format!("/registry/namespaces/{name}"),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}),
        )
    }

    struct Outcome {
        result: Result<(), ApiError>,
        warnings: Vec<String>,
    }

    async fn run(
        store: Arc<dyn Store>,
        method: http::Method,
        path: &str,
        operation: Operation,
        mut obj: Value,
        old: Option<&Value>,
    ) -> Outcome {
        let info = parse_request(&method, path, None);
        let user = UserInfo::default();
        let warnings = Warnings::default();
        let attrs = Attributes {
            operation,
            request: &info,
            user: &user,
            object: Some(&mut obj),
            old_object: old,
            dry_run: false,
            options: None,
            warnings: &warnings,
        };
        let result = PodSecurity {
            listers: crate::admission::listers::Listers::new(store),
        }
        .validate(&attrs)
        .await;
        Outcome {
            result,
            warnings: warnings.take(),
        }
    }

    fn privileged_pod(ns: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ns},
               "spec": {"containers": [{"name": "c", "image": "nginx", "securityContext": {"privileged": true}}]}})
    }

    #[tokio::test]
    async fn enforce_refuses_warn_warns() {
        let (ek, ev) = namespace("enforced", json!({ENFORCE_LEVEL_LABEL: "baseline"}));
        let (wk, wv) = namespace(
            "warned",
            json!({WARN_LEVEL_LABEL: "baseline", AUDIT_LEVEL_LABEL: "restricted"}),
        );
        let (pk, pv) = namespace("plain", json!({}));
        let (_d, s) = store_with(&[(&ek, ev), (&wk, wv), (&pk, pv)]).await;
        let post = |ns: &str| format!("/api/v1/namespaces/{ns}/pods");

        let out = run(
            s.clone(),
            http::Method::POST,
            &post("enforced"),
            Operation::Create,
            privileged_pod("enforced"),
            None,
        )
        .await;
        let err = out.result.unwrap_err();
        assert_eq!((err.code, err.reason), (403, "Forbidden"));
        assert_eq!(
            err.message,
            "pods \"p\" is forbidden: violates PodSecurity \"baseline:latest\": privileged (container \"c\" must not set securityContext.privileged=true)"
        );
        assert!(out.warnings.is_empty(), "no warnings on a refusal");

        let out = run(
            s.clone(),
            http::Method::POST,
            &post("warned"),
            Operation::Create,
            privileged_pod("warned"),
            None,
        )
        .await;
        assert!(out.result.is_ok());
        assert_eq!(
            out.warnings,
            ["would violate PodSecurity \"baseline:latest\": privileged (container \"c\" must not set securityContext.privileged=true)"]
        );

        let out = run(
            s.clone(),
            http::Method::POST,
            &post("plain"),
            Operation::Create,
            privileged_pod("plain"),
            None,
        )
        .await;
        assert!(out.result.is_ok() && out.warnings.is_empty());

        // Status and other ignored subresources are not checked.
        let out = run(
            s.clone(),
            http::Method::PUT,
            "/api/v1/namespaces/enforced/pods/p/status",
            Operation::Update,
            privileged_pod("enforced"),
            Some(&json!({})),
        )
        .await;
        assert!(out.result.is_ok());

        // An update that changes no image is not checked; one that does is.
        let old = privileged_pod("enforced");
        let mut relabelled = old.clone();
        relabelled["metadata"]["labels"] = json!({"a": "b"});
        let put = "/api/v1/namespaces/enforced/pods/p";
        let out = run(
            s.clone(),
            http::Method::PUT,
            put,
            Operation::Update,
            relabelled,
            Some(&old),
        )
        .await;
        assert!(out.result.is_ok());
        let mut new_image = old.clone();
        new_image["spec"]["containers"][0]["image"] = json!("nginx:2");
        let out = run(
            s.clone(),
            http::Method::PUT,
            put,
            Operation::Update,
            new_image,
            Some(&old),
        )
        .await;
        assert_eq!(out.result.unwrap_err().code, 403);
    }

    #[tokio::test]
    async fn workloads_are_warned_about_never_refused() {
        let (k, v) = namespace("ns", json!({ENFORCE_LEVEL_LABEL: "restricted"}));
        let (_d, s) = store_with(&[(&k, v)]).await;
        let pod = privileged_pod("ns");
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"template": {"metadata": {"labels": {"app": "web"}}, "spec": pod["spec"]}}});
        let out = run(
            s.clone(),
            http::Method::POST,
            "/apis/apps/v1/namespaces/ns/deployments",
            Operation::Create,
            deployment,
            None,
        )
        .await;
        assert!(out.result.is_ok());
        assert_eq!(out.warnings.len(), 1);
        assert!(out.warnings[0].starts_with(
            "would violate PodSecurity \"restricted:latest\": privileged (container \"c\" must not set securityContext.privileged=true), allowPrivilegeEscalation != false"
        ), "{:?}", out.warnings);
        // Scale and status subresources are not checked.
        let out = run(
            s,
            http::Method::PUT,
            "/apis/apps/v1/namespaces/ns/deployments/web/scale",
            Operation::Update,
            json!({"kind": "Scale"}),
            Some(&json!({})),
        )
        .await;
        assert!(out.result.is_ok() && out.warnings.is_empty());
    }

    #[tokio::test]
    async fn namespace_labels_are_validated_and_a_stricter_enforce_level_checks_existing_pods() {
        let mut pods: Vec<(String, Value)> = ["b", "a", "c"]
            .into_iter()
            .map(|n| {
                let mut p = privileged_pod("ns");
                p["metadata"]["name"] = json!(n);
                (format!("/registry/pods/ns/{n}"), p)
            })
            .collect();
        let mut fine = restricted_pod();
        fine["metadata"] = json!({"name": "fine", "namespace": "ns"});
        pods.push(("/registry/pods/ns/fine".into(), fine));
        let mut plain = json!({"metadata": {"name": "d", "namespace": "ns"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        pods.push(("/registry/pods/ns/d".into(), plain.take()));
        let objects: Vec<(&str, Value)> = pods.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
        let (_d, s) = store_with(&objects).await;

        let ns = |labels: Value| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns", "labels": labels}});
        let out = run(
            s.clone(),
            http::Method::POST,
            "/api/v1/namespaces",
            Operation::Create,
            ns(json!({ENFORCE_LEVEL_LABEL: "strict"})),
            None,
        )
        .await;
        let err = out.result.unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(
            err.message,
            "Namespace \"ns\" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": must be one of privileged, baseline, restricted"
        );

        let old = ns(json!({}));
        let out = run(
            s.clone(),
            http::Method::PUT,
            "/api/v1/namespaces/ns",
            Operation::Update,
            ns(json!({ENFORCE_LEVEL_LABEL: "restricted"})),
            Some(&old),
        )
        .await;
        assert!(out.result.is_ok());
        assert_eq!(
            out.warnings,
            [
                "existing pods in namespace \"ns\" violate the new PodSecurity enforce level \"restricted:latest\"",
                "a (and 2 other pods): privileged, allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile",
                "d: allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile",
            ]
        );
        // Relaxing the level, or leaving it, checks nothing.
        let old = ns(json!({ENFORCE_LEVEL_LABEL: "restricted"}));
        let out = run(
            s.clone(),
            http::Method::PUT,
            "/api/v1/namespaces/ns",
            Operation::Update,
            ns(json!({ENFORCE_LEVEL_LABEL: "baseline"})),
            Some(&old),
        )
        .await;
        assert!(out.result.is_ok() && out.warnings.is_empty());
        // Invalid labels already there may stay; new invalid ones are refused.
        let old = ns(json!({AUDIT_LEVEL_LABEL: "x"}));
        let out = run(
            s.clone(),
            http::Method::PUT,
            "/api/v1/namespaces/ns",
            Operation::Update,
            ns(json!({AUDIT_LEVEL_LABEL: "x", "team": "a"})),
            Some(&old),
        )
        .await;
        assert!(out.result.is_ok());
        let out = run(
            s,
            http::Method::PUT,
            "/api/v1/namespaces/ns",
            Operation::Update,
            ns(json!({AUDIT_LEVEL_LABEL: "y"})),
            Some(&old),
        )
        .await;
        assert_eq!(out.result.unwrap_err().code, 422);
    }
}
