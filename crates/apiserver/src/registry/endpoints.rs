//! Endpoints and EndpointSlices (upstream's `pkg/registry/core/endpoint` and
//! `pkg/registry/discovery/endpointslice`): TCP by default, the tables.

use serde_json::{json, Value};

use super::strategy::{age_cell, col, name_cell, Column, Strategy, AGE, NAME};

pub(crate) struct Endpoints;

impl Strategy for Endpoints {
    fn default(&self, obj: &mut Value) {
        // (`get_mut`, not indexing: indexing a Value mutably adds the key.)
        let subsets = obj.get_mut("subsets").and_then(Value::as_array_mut);
        for subset in subsets.into_iter().flatten() {
            let ports = subset.get_mut("ports").and_then(Value::as_array_mut);
            for p in ports.into_iter().flatten().filter(|p| p.is_object()) {
                if p.get("protocol").is_none_or(Value::is_null) {
                    p["protocol"] = json!("TCP");
                }
            }
        }
    }

    fn columns(&self) -> Vec<Column> {
        vec![NAME, col("Endpoints", "string", "Endpoints of the resource"), AGE]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        // ip:port for every address and port, the first three shown (upstream's printer).
        let mut all = Vec::new();
        for subset in obj["subsets"].as_array().into_iter().flatten() {
            let ips: Vec<&str> = subset["addresses"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| a["ip"].as_str().unwrap_or(""))
                .collect();
            match subset["ports"].as_array().filter(|p| !p.is_empty()) {
                None => all.extend(ips.iter().map(|ip| ip.to_string())),
                Some(ports) => {
                    for p in ports {
                        all.extend(ips.iter().map(|ip| format!("{ip}:{}", p["port"])));
                    }
                }
            }
        }
        vec![name_cell(obj), json!(first_three(&all)), age_cell(obj)]
    }
}

pub(crate) struct EndpointSlices;

impl Strategy for EndpointSlices {
    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("AddressType", "string", "The IP protocol for this slice"),
            col("Ports", "string", "The ports for this slice"),
            col("Endpoints", "string", "The endpoints for this slice"),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let ports: Vec<String> = obj["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| p["port"].as_i64().map_or("<unset>".to_owned(), |n| n.to_string()))
            .collect();
        let addresses: Vec<String> = obj["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|e| e["addresses"].as_array().into_iter().flatten())
            .filter_map(|a| a.as_str().map(String::from))
            .collect();
        vec![
            name_cell(obj),
            json!(obj["addressType"].as_str().unwrap_or("")),
            json!(if ports.is_empty() {
                "<unset>".to_owned()
            } else {
                ports.join(",")
            }),
            json!(if addresses.is_empty() {
                "<unset>".to_owned()
            } else {
                first_three(&addresses)
            }),
            age_cell(obj),
        ]
    }
}

/// Up to three entries and how many more (upstream's endpoints printers), `<none>` for none.
fn first_three(all: &[String]) -> String {
    match all.len() {
        0 => "<none>".to_owned(),
        1..=3 => all.join(","),
        n => format!("{} + {} more...", all[..3].join(","), n - 3),
    }
}
