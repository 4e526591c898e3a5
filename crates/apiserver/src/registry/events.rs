//! Events, core `v1` and `events.k8s.io/v1` (one storage, see `convert`): the field
//! selectors of the involved object, the table (upstream `printEvent`).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::meta::{human_age, str_field};
use super::strategy::{col, name_cell, wide, Column, Strategy, NAME};

/// Events of both APIs, stored as one: `events.k8s.io/v1` ones in the core form.
pub(crate) struct Events {
    /// Served in another form than stored (`events.k8s.io/v1`).
    pub stored_as_core: bool,
}

impl Strategy for Events {
    fn converts(&self) -> bool {
        self.stored_as_core
    }

    fn to_storage(&self, obj: Value) -> Value {
        super::convert::event_to_core(obj)
    }

    fn served_from_storage(&self, obj: Value, api_version: &str) -> Value {
        super::convert::event_from_core(obj, api_version)
    }

    fn fields(&self, obj: &Value, f: &mut BTreeMap<String, String>) {
        if self.stored_as_core {
            // events.k8s.io/v1 selects by its own field names (upstream's field label
            // conversion for that version), read from the object in either form (served, or
            // stored as core).
            let both = |served: &[&str], core: &[&str]| {
                str_field(obj, served)
                    .or(str_field(obj, core))
                    .unwrap_or("")
                    .to_owned()
            };
            for field in [
                "kind",
                "name",
                "namespace",
                "uid",
                "apiVersion",
                "resourceVersion",
                "fieldPath",
            ] {
                f.insert(
                    format!("regarding.{field}"),
                    both(&["regarding", field], &["involvedObject", field]),
                );
            }
            f.insert("reason".into(), both(&["reason"], &["reason"]));
            f.insert(
                "reportingController".into(),
                both(&["reportingController"], &["reportingComponent"]),
            );
            f.insert("type".into(), both(&["type"], &["type"]));
            return;
        }
        for (k, path) in [
            ("involvedObject.kind", &["involvedObject", "kind"][..]),
            ("involvedObject.name", &["involvedObject", "name"]),
            ("involvedObject.namespace", &["involvedObject", "namespace"]),
            ("involvedObject.uid", &["involvedObject", "uid"]),
            ("involvedObject.apiVersion", &["involvedObject", "apiVersion"]),
            (
                "involvedObject.resourceVersion",
                &["involvedObject", "resourceVersion"],
            ),
            ("involvedObject.fieldPath", &["involvedObject", "fieldPath"]),
            ("reason", &["reason"]),
            ("reportingComponent", &["reportingComponent"]),
            ("type", &["type"]),
        ] {
            f.insert(k.to_owned(), str_field(obj, path).unwrap_or("").to_owned());
        }
        // Upstream's `source`: the source component, else the reporting controller.
        let source = str_field(obj, &["source", "component"])
            .filter(|s| !s.is_empty())
            .or(str_field(obj, &["reportingComponent"]))
            .unwrap_or("");
        f.insert("source".to_owned(), source.to_owned());
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            col("Last Seen", "string", "The time at which the most recent occurrence of this event was recorded."),
            col("Type", "string", "Type of this event (Normal, Warning), new types could be added in the future."),
            col("Reason", "string", "This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
            col("Object", "string", "The object that this event is about."),
            wide("Subobject", "The sub-object (field path) of the object that this event is about."),
            wide("Source", "The component reporting this event."),
            col("Message", "string", "A human-readable description of the status of this operation."),
            wide("First Seen", "The time at which the event was first recorded."),
            wide("Count", "The number of times this event has occurred."),
            Column { priority: 1, ..NAME },
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        event_cells(obj, name_cell(obj))
    }
}

/// An event's row, from the core/v1 or the events.k8s.io/v1 form (upstream `printEvent`).
fn event_cells(obj: &Value, name: Value) -> Vec<Value> {
    let first = ["firstTimestamp", "deprecatedFirstTimestamp", "eventTime"]
        .iter()
        .find_map(|k| obj[*k].as_str())
        .or(str_field(obj, &["metadata", "creationTimestamp"]));
    let last = obj["series"]["lastObservedTime"]
        .as_str()
        .or(obj["lastTimestamp"].as_str())
        .or(obj["deprecatedLastTimestamp"].as_str())
        .or(first);
    let count = obj["series"]["count"]
        .as_i64()
        .or(obj["count"].as_i64())
        .or(obj["deprecatedCount"].as_i64())
        .unwrap_or(1);
    let last_seen = if count > 1 {
        format!("{} (x{count} over {})", human_age(last), human_age(first))
    } else {
        human_age(last)
    };
    let regarding = if obj["involvedObject"].is_object() {
        &obj["involvedObject"]
    } else {
        &obj["regarding"]
    };
    let object = format!(
        "{}/{}",
        regarding["kind"].as_str().unwrap_or("").to_lowercase(),
        regarding["name"].as_str().unwrap_or("")
    );
    let source = match (
        obj["source"]["component"]
            .as_str()
            .or(obj["reportingController"].as_str()),
        obj["source"]["host"].as_str(),
    ) {
        (Some(c), Some(h)) => format!("{c}, {h}"),
        (Some(c), None) => c.to_owned(),
        _ => String::new(),
    };
    vec![
        json!(last_seen),
        json!(obj["type"].as_str().unwrap_or("")),
        json!(obj["reason"].as_str().unwrap_or("")),
        json!(object),
        json!(regarding["fieldPath"].as_str().unwrap_or("")),
        json!(source),
        json!(obj["message"].as_str().or(obj["note"].as_str()).unwrap_or("")),
        json!(human_age(first)),
        json!(count.to_string()),
        name,
    ]
}

#[cfg(test)]
mod event_table_tests {
    use super::*;

    #[test]
    fn event_rows_read_both_event_apis() {
        let core = json!({
            "metadata": {"name": "web.1", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "involvedObject": {"kind": "Deployment", "name": "web"},
            "type": "Normal", "reason": "ScalingReplicaSet",
            "message": "Scaled up replica set web-abc from 0 to 3",
            "source": {"component": "deployment-controller"},
            "count": 1,
        });
        let cells = event_cells(&core, json!("web.1"));
        assert_eq!(cells[1], "Normal");
        assert_eq!(cells[2], "ScalingReplicaSet");
        assert_eq!(cells[3], "deployment/web");
        assert_eq!(cells[5], "deployment-controller");
        assert_eq!(cells[6], "Scaled up replica set web-abc from 0 to 3");
        assert_eq!(cells.len(), 10);
        let new = json!({
            "metadata": {"name": "p.2", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "regarding": {"kind": "Pod", "name": "p"},
            "type": "Warning", "reason": "Failed", "note": "boom",
            "reportingController": "kubelet",
            "series": {"count": 3, "lastObservedTime": "2020-01-01T00:00:00.000000Z"},
        });
        let cells = event_cells(&new, json!("p.2"));
        assert_eq!(cells[3], "pod/p");
        assert_eq!(cells[6], "boom");
        assert_eq!(cells[8], "3");
        assert!(cells[0].as_str().unwrap().contains("(x3 over "), "{}", cells[0]);
    }
}
