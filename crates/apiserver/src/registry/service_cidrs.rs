//! ServiceCIDRs and IPAddresses (networking.k8s.io/v1, upstream's
//! `pkg/registry/networking/servicecidr` and `ipaddress`): the ranges Services take their
//! cluster IPs from, and one object per address. The server makes the default ServiceCIDR,
//! `kubernetes`, from `--service-cidr` at start (Ready). r8s's allocator keeps its own record
//! of the addresses Services hold: IPAddress objects are served for clients that write or read
//! them, but the allocator neither writes nor consults them.

use std::net::IpAddr;

use r8s_api::validation::FieldError;
use serde_json::{json, Value};

use super::allocator::ServiceCidr;
use super::meta;
use super::strategy::{age_cell, col, go_string, name_cell, Column, Strategy, AGE, NAME};

pub(crate) struct ServiceCidrs;

/// The name of the ServiceCIDR the server makes from its flags.
pub(crate) const DEFAULT_NAME: &str = "kubernetes";

impl Strategy for ServiceCidrs {
    fn status_subresource(&self) -> bool {
        true
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let cidrs: Vec<&Value> = obj["spec"]["cidrs"].as_array().into_iter().flatten().collect();
        if cidrs.is_empty() {
            errs.push(FieldError::required("spec.cidrs", "at least one CIDR required"));
        }
        if cidrs.len() > 2 {
            errs.push(FieldError::invalid_raw(
                "spec.cidrs",
                &go_string(&obj["spec"]["cidrs"]),
                "may only hold up to 2 values",
            ));
        }
        let mut families = Vec::new();
        for (i, c) in cidrs.iter().enumerate() {
            let text = c.as_str().unwrap_or("");
            match ServiceCidr::parse(text) {
                Ok(cidr) if cidr.to_string() == text => families.push(cidr.family()),
                Ok(cidr) => errs.push(FieldError::invalid(
                    format!("spec.cidrs[{i}]"),
                    text,
                    format!("must be in canonical form (\"{cidr}\")"),
                )),
                Err(e) => errs.push(FieldError::invalid(format!("spec.cidrs[{i}]"), text, e)),
            }
        }
        if families.len() == 2 && families[0] == families[1] {
            errs.push(FieldError::invalid(
                "spec.cidrs",
                &go_string(&obj["spec"]["cidrs"]),
                "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64",
            ));
        }
        errs
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        // Upstream lets a single-stack range gain the other family, nothing else.
        let (new, was) = (&obj["spec"]["cidrs"], &old["spec"]["cidrs"]);
        let grows = was.as_array().is_some_and(|w| w.len() == 1)
            && new.as_array().is_some_and(|n| n.len() == 2 && n[0] == was[0]);
        if new != was && !grows {
            return vec![FieldError::invalid_raw(
                "spec.cidrs",
                &go_string(new),
                "field is immutable",
            )];
        }
        Vec::new()
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("CIDRs", "string", "list of IP blocks in CIDR notation"),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let cidrs: Vec<&str> = obj["spec"]["cidrs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        vec![name_cell(obj), json!(cidrs.join(",")), age_cell(obj)]
    }
}

pub(crate) struct IpAddresses;

impl Strategy for IpAddresses {
    fn validate_name(&self, name: &str) -> Vec<String> {
        // The name is the address, in its canonical form (upstream's `ValidateIPAddressName`).
        match name.parse::<IpAddr>() {
            Ok(ip) if ip.to_string() == name && !ip.is_unspecified() => Vec::new(),
            Ok(ip) if ip.is_unspecified() => vec!["may not be the unspecified address".into()],
            Ok(ip) => vec![format!("must be in canonical form (\"{ip}\")")],
            Err(_) => vec!["must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)".into()],
        }
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let parent = &obj["spec"]["parentRef"];
        if !parent.is_object() {
            errs.push(FieldError::required("spec.parentRef", ""));
            return errs;
        }
        for field in ["resource", "name"] {
            if parent[field].as_str().is_none_or(str::is_empty) {
                errs.push(FieldError::required(format!("spec.parentRef.{field}"), ""));
            }
        }
        errs
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        if obj["spec"]["parentRef"] != old["spec"]["parentRef"] {
            return vec![FieldError::invalid_raw(
                "spec.parentRef",
                &go_string(&obj["spec"]["parentRef"]),
                "field is immutable",
            )];
        }
        Vec::new()
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col(
                "ParentRef",
                "string",
                "ParentRef references the resource (usually a Service) that the IP address is assigned to",
            ),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let p = &obj["spec"]["parentRef"];
        let s = |k: &str| p[k].as_str().unwrap_or("").to_string();
        let group = s("group");
        let resource = if group.is_empty() {
            s("resource")
        } else {
            format!("{}.{group}", s("resource"))
        };
        vec![
            name_cell(obj),
            json!(format!("{resource}/{}/{}", s("namespace"), s("name"))),
        ]
    }
}

/// The default ServiceCIDR for the server's ranges, Ready as upstream's controller marks it.
pub(crate) fn default_object(cidrs: &[String]) -> Value {
    json!({
        "kind": "ServiceCIDR",
        "apiVersion": "networking.k8s.io/v1",
        "metadata": {
            "name": DEFAULT_NAME,
            "uid": uuid::Uuid::new_v4().to_string(),
            "creationTimestamp": meta::now_rfc3339(),
        },
        "spec": {"cidrs": cidrs},
        "status": {"conditions": [{
            "type": "Ready",
            "status": "True",
            "reason": "",
            "message": "Kubernetes Service CIDR is ready",
            "lastTransitionTime": meta::now_rfc3339(),
        }]},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(s: &dyn Strategy, obj: Value) -> Vec<String> {
        s.validate(&obj).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn service_cidrs_are_one_or_two_canonical_ranges_of_different_families() {
        let ok = |c: Value| errors(&ServiceCidrs, json!({"spec": {"cidrs": c}}));
        assert!(ok(json!(["10.43.0.0/16"])).is_empty());
        assert!(ok(json!(["10.43.0.0/16", "fd43::/112"])).is_empty());
        assert_eq!(ok(json!([])).len(), 1);
        assert_eq!(ok(json!(["10.43.0.1/16"])).len(), 1, "not canonical");
        assert_eq!(ok(json!(["10.43.0.0/16", "10.44.0.0/16"])).len(), 1);
        let old = json!({"spec": {"cidrs": ["10.43.0.0/16"]}});
        assert!(ServiceCidrs
            .validate_update(&json!({"spec": {"cidrs": ["10.43.0.0/16", "fd43::/112"]}}), &old)
            .is_empty());
        assert_eq!(
            ServiceCidrs
                .validate_update(&json!({"spec": {"cidrs": ["10.44.0.0/16"]}}), &old)
                .len(),
            1
        );
    }

    #[test]
    fn ip_addresses_are_named_by_their_canonical_address() {
        assert!(IpAddresses.validate_name("255.255.255.255").is_empty());
        assert!(IpAddresses.validate_name("fe80::42:1dff:fe84:f9e2").is_empty());
        assert_eq!(IpAddresses.validate_name("fe80:0::1").len(), 1);
        assert_eq!(IpAddresses.validate_name("web").len(), 1);
        let parent = json!({"group": "g", "resource": "r", "namespace": "n", "name": "x"});
        assert!(errors(&IpAddresses, json!({"spec": {"parentRef": parent}})).is_empty());
        assert_eq!(
            errors(&IpAddresses, json!({"spec": {}})),
            ["spec.parentRef: Required value"]
        );
    }
}
