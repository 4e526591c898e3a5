//! Feature gates (`--feature-gates`): process-wide switches, as upstream's default feature gate.

use std::sync::atomic::{AtomicBool, Ordering};

static INITIALIZERS: AtomicBool = AtomicBool::new(false);

/// The `Initializers` gate (alpha, removed upstream in 1.14; the reference document tells it):
/// InitializerConfigurations add pending initializers to new objects, which stay invisible
/// until every initializer has removed its name.
pub fn initializers() -> bool {
    INITIALIZERS.load(Ordering::Relaxed)
}

static MAX_UNAVAILABLE_STATEFUL_SET: AtomicBool = AtomicBool::new(false);

/// The `MaxUnavailableStatefulSet` gate (alpha in 1.33, off by default as upstream's): a
/// StatefulSet's `rollingUpdate.maxUnavailable` is kept and its rolling update replaces that
/// many pods at once; with the gate off the field is dropped from new objects.
pub fn max_unavailable_stateful_set() -> bool {
    MAX_UNAVAILABLE_STATEFUL_SET.load(Ordering::Relaxed)
}

static MUTATING_ADMISSION_POLICY: AtomicBool = AtomicBool::new(false);

/// The `MutatingAdmissionPolicy` gate (alpha in 1.33, off by default as upstream's):
/// MutatingAdmissionPolicies and their bindings (admissionregistration.k8s.io/v1alpha1) are
/// served and applied. Upstream also wants the group version turned on with
/// `--runtime-config`; r8s serves it with the gate alone.
pub fn mutating_admission_policy() -> bool {
    MUTATING_ADMISSION_POLICY.load(Ordering::Relaxed)
}

/// Set gates from `Name=true,Other=false`; unknown names are an error.
pub fn set(spec: &str) -> Result<(), String> {
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, value) = item
            .split_once('=')
            .ok_or_else(|| format!("missing bool value for {item}"))?;
        let on: bool = value.parse().map_err(|_| {
            format!(
                "invalid value of {name}={value}, err: strconv.ParseBool: parsing {value:?}: invalid syntax"
            )
        })?;
        match name {
            "Initializers" => INITIALIZERS.store(on, Ordering::Relaxed),
            "MaxUnavailableStatefulSet" => MAX_UNAVAILABLE_STATEFUL_SET.store(on, Ordering::Relaxed),
            "MutatingAdmissionPolicy" => MUTATING_ADMISSION_POLICY.store(on, Ordering::Relaxed),
            other => return Err(format!("unrecognized feature gate: {other}")),
        }
    }
    Ok(())
}
