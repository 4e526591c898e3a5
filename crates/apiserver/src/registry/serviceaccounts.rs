//! ServiceAccounts (upstream's `pkg/registry/core/serviceaccount`): the table, and `token`
//! (a TokenRequest, see `token_request`).

use serde_json::{json, Value};

use super::strategy::{age_cell, col, name_cell, Column, Connect, Strategy, AGE, NAME};

pub(crate) struct ServiceAccounts;

impl Strategy for ServiceAccounts {
    fn columns(&self) -> Vec<Column> {
        vec![
            NAME,
            col("Secrets", "string", "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use."),
            AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![
            name_cell(obj),
            json!(obj["secrets"].as_array().map(Vec::len).unwrap_or(0)),
            age_cell(obj),
        ]
    }

    fn connect(&self, sub: &str) -> Option<Connect> {
        (sub == "token").then_some(Connect::Token)
    }
}
