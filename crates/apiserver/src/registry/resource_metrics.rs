//! NodeMetrics and PodMetrics (`metrics.k8s.io/v1beta1`): never stored, computed by
//! `endpoints::resource_metrics`; here only their Table, as metrics-server prints it (the
//! name, one column per resource, the window; a pod's usage summed over its containers).

use serde_json::{json, Value};

use super::strategy::{name_cell, Column, Strategy};

pub(crate) struct ResourceMetrics;

const fn column(name: &'static str, format: &'static str, description: &'static str) -> Column {
    Column {
        name,
        kind: "string",
        format,
        description,
        priority: 0,
    }
}

/// The sum of a quantity over a pod's containers, printed as upstream's `Quantity` prints.
fn sum(containers: &[Value], resource: &str) -> String {
    use r8s_api::quantity::Quantity;
    containers
        .iter()
        .filter_map(|c| c["usage"][resource].as_str())
        .filter_map(|q| Quantity::parse(q).ok())
        .reduce(|a, b| a.add(&b))
        .unwrap_or_default()
        .to_string()
}

impl Strategy for ResourceMetrics {
    fn columns(&self) -> Vec<Column> {
        vec![
            column("Name", "name", "Name of the resource"),
            column("cpu", "quantity", ""),
            column("memory", "quantity", ""),
            column("Window", "duration", ""),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let (cpu, memory) = match obj["containers"].as_array() {
            Some(cs) => (sum(cs, "cpu"), sum(cs, "memory")),
            None => (
                obj["usage"]["cpu"].as_str().unwrap_or("").to_owned(),
                obj["usage"]["memory"].as_str().unwrap_or("").to_owned(),
            ),
        };
        vec![name_cell(obj), json!(cpu), json!(memory), obj["window"].clone()]
    }
}
