//! What `-o` prints: the server's Tables, YAML and JSON as Go writes them, `name`.

pub mod go_order;
mod go_order_table;
pub mod gotemplate;
pub mod json;
pub mod jsonpath;
pub mod table;
pub mod yaml;

/// `resource/name` as `-o name` prints it: the kind lower-cased, with its group.
pub fn name_of(kind: &str, group: &str, name: &str) -> String {
    if group.is_empty() {
        format!("{}/{name}", kind.to_lowercase())
    } else {
        format!("{}.{group}/{name}", kind.to_lowercase())
    }
}
