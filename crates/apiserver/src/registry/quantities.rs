//! Resource quantities in the objects clients write, as upstream's decoder and defaults treat
//! them: a value that is not a quantity fails decoding (400, `... cannot be handled as a Pod:
//! quantities must match ...`), and each is kept in its canonical form ("0.5" → "500m",
//! "1.5Gi" → "1536Mi"), the values of resource lists rounded up to thousandths
//! (`SetDefaults_ResourceList`), so that every reader sees what a kubeadm cluster would store.

use crate::registry::Resource;
use r8s_api::quantity::Quantity;
use serde_json::Value;

/// Upstream's decoding error for a malformed quantity.
pub(crate) const FORMAT_ERROR: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// Check and canonicalise the quantities of a decoded object of `def` (each resource's
/// strategy knows where its quantities are).
pub(crate) fn canonicalize(def: &Resource, obj: &mut Value) -> Result<(), &'static str> {
    def.strategy.canonicalize_quantities(obj)
}

/// The quantities of a pod spec: its containers' resources, overhead, pod-level resources and
/// emptyDir size limits.
pub(crate) fn pod_spec(spec: Option<&mut Value>) -> Result<(), &'static str> {
    let Some(spec) = spec else { return Ok(()) };
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        let containers = spec.get_mut(list).and_then(Value::as_array_mut);
        for c in containers.into_iter().flatten() {
            lists(c.get_mut("resources"), &["limits", "requests"])?;
        }
    }
    lists(Some(&mut *spec), &["overhead"])?;
    lists(spec.get_mut("resources"), &["limits", "requests"])?;
    let volumes = spec.get_mut("volumes").and_then(Value::as_array_mut);
    for v in volumes.into_iter().flatten() {
        if let Some(size) = v.get_mut("emptyDir").and_then(|e| e.get_mut("sizeLimit")) {
            // A single quantity, not a resource list: canonical, not rounded.
            *size = Value::String(parse(size)?.to_string());
        }
    }
    Ok(())
}

/// The resource lists (name → quantity) at `keys` of `parent`.
pub(crate) fn lists(parent: Option<&mut Value>, keys: &[&str]) -> Result<(), &'static str> {
    let Some(parent) = parent else { return Ok(()) };
    for key in keys {
        let Some(list) = parent.get_mut(*key).and_then(Value::as_object_mut) else {
            continue;
        };
        for q in list.values_mut() {
            *q = Value::String(parse(q)?.round_up_milli().to_string());
        }
    }
    Ok(())
}

fn parse(v: &Value) -> Result<Quantity, &'static str> {
    match v {
        Value::String(s) => Quantity::parse(s).map_err(|_| FORMAT_ERROR),
        // JSON numbers are quantities too ("cpu: 1" in YAML).
        Value::Number(n) => Quantity::parse(&n.to_string()).map_err(|_| FORMAT_ERROR),
        _ => Err(FORMAT_ERROR),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(kind: &str) -> &'static Resource {
        crate::registry::catalogue::builtins()
            .iter()
            .find(|d| d.kind == kind && d.group != "events.k8s.io")
            .unwrap()
    }

    #[test]
    fn quantities_are_stored_canonical_and_rounded_up_to_thousandths() {
        let mut pod = json!({"spec": {
            "containers": [{"resources": {"requests": {"cpu": "0.5", "memory": "1.5Gi"},
                                          "limits": {"cpu": 1, "memory": "1000Mi", "example.com/gpu": "2"}}}],
            "initContainers": [{"resources": {"requests": {"cpu": "1u"}}}],
            "overhead": {"cpu": "250m"},
            "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1024Mi"}}],
        }});
        canonicalize(def("Pod"), &mut pod).unwrap();
        let s = &pod["spec"];
        assert_eq!(
            s["containers"][0]["resources"],
            json!({"requests": {"cpu": "500m", "memory": "1536Mi"},
                   "limits": {"cpu": "1", "memory": "1000Mi", "example.com/gpu": "2"}})
        );
        assert_eq!(s["initContainers"][0]["resources"]["requests"]["cpu"], "1m");
        assert_eq!(s["overhead"]["cpu"], "250m");
        assert_eq!(s["volumes"][0]["emptyDir"]["sizeLimit"], "1Gi");

        let mut lr = json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "2000m"}}]}});
        canonicalize(def("LimitRange"), &mut lr).unwrap();
        assert_eq!(lr["spec"]["limits"][0]["max"]["cpu"], "2");
        let mut d = json!({"spec": {"template": {"spec": {"containers": [{"resources": {"limits": {"memory": "0.5Gi"}}}]}}}});
        canonicalize(def("Deployment"), &mut d).unwrap();
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"],
            "512Mi"
        );
    }

    #[test]
    fn a_malformed_quantity_is_upstreams_decoding_error() {
        for bad in [json!("abc"), json!("1.5.5"), json!("10 Gi"), json!(true)] {
            let mut pod = json!({"spec": {"containers": [{"resources": {"requests": {"cpu": bad}}}]}});
            assert_eq!(canonicalize(def("Pod"), &mut pod), Err(FORMAT_ERROR), "{bad}");
        }
        let mut quota = json!({"spec": {"hard": {"pods": "ten"}}});
        assert_eq!(canonicalize(def("ResourceQuota"), &mut quota), Err(FORMAT_ERROR));
        // Objects without quantities pass untouched.
        let mut cm = json!({"data": {"cpu": "abc"}});
        assert_eq!(canonicalize(def("ConfigMap"), &mut cm), Ok(()));
        assert_eq!(cm, json!({"data": {"cpu": "abc"}}));
    }
}
