//! Nodes (upstream's `pkg/registry/core/node`): a kubelet registers its Node with its status,
//! allocatable defaults to capacity, the table, and `proxy` to the node's kubelet.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::meta;
use super::strategy::{age_cell, col, name_cell, wide, Column, Connect, Strategy, AGE, NAME};
use crate::authn::UserInfo;

pub(crate) struct Nodes;

impl Strategy for Nodes {
    fn canonicalize_quantities(&self, obj: &mut Value) -> Result<(), &'static str> {
        super::quantities::lists(obj.get_mut("status"), &["capacity", "allocatable"])
    }

    fn tracks_generation(&self) -> bool {
        true
    }

    fn status_subresource(&self) -> bool {
        true
    }

    /// A kubelet registers its Node with its status (capacity, addresses, conditions) in the
    /// create, so nodes keep theirs, as upstream's node strategy does.
    fn prepare_for_create(&self, _: &UserInfo, _: &mut Value) {}

    fn default(&self, obj: &mut Value) {
        let status = &obj["status"];
        if status.get("allocatable").is_none_or(Value::is_null) && status["capacity"].is_object() {
            obj["status"]["allocatable"] = obj["status"]["capacity"].clone();
        }
    }

    fn fields(&self, obj: &Value, f: &mut BTreeMap<String, String>) {
        f.insert(
            "spec.unschedulable".into(),
            obj["spec"]["unschedulable"]
                .as_bool()
                .unwrap_or(false)
                .to_string(),
        );
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("Status", "string", "The status of the node"),
            col("Roles", "string", "The roles of the node"),
            AGE,
            col("Version", "string", "Kubelet Version reported by the node."),
            wide("Internal-IP", "List of addresses reachable to the node."),
            wide("External-IP", "List of addresses reachable to the node."),
            wide("OS-Image", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
            wide("Kernel-Version", "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
            wide("Container-Runtime", "Container Runtime Version reported by the node through runtime remote API (e.g. containerd://1.4.2)."),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let (spec, status) = (&obj["spec"], &obj["status"]);
        let ready = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready")
            .map(|c| {
                if c["status"] == "True" {
                    "Ready"
                } else {
                    "NotReady"
                }
            })
            .unwrap_or("Unknown");
        let mut st = ready.to_owned();
        if spec["unschedulable"] == true {
            st.push_str(",SchedulingDisabled");
        }
        let roles: Vec<String> = meta::labels(obj)
            .keys()
            .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/").map(str::to_owned))
            .collect();
        let addr = |t: &str| {
            status["addresses"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|a| a["type"] == t)
                .and_then(|a| a["address"].as_str())
                .unwrap_or("<none>")
                .to_owned()
        };
        let info = &status["nodeInfo"];
        vec![
            name_cell(obj),
            json!(st),
            json!(if roles.is_empty() {
                "<none>".to_owned()
            } else {
                roles.join(",")
            }),
            age_cell(obj),
            json!(info["kubeletVersion"].as_str().unwrap_or("")),
            json!(addr("InternalIP")),
            json!(addr("ExternalIP")),
            json!(info["osImage"].as_str().unwrap_or("<unknown>")),
            json!(info["kernelVersion"].as_str().unwrap_or("<unknown>")),
            json!(info["containerRuntimeVersion"].as_str().unwrap_or("<unknown>")),
        ]
    }

    fn connect(&self, sub: &str) -> Option<Connect> {
        (sub == "proxy").then_some(Connect::NodeProxy)
    }
}
