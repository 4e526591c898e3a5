//! `audit.k8s.io/v1` `Event`, serialized with upstream's field names and order.

use std::collections::BTreeMap;

use serde::{Serialize, Serializer};
use serde_json::Value;
use time::OffsetDateTime;

use super::policy::{Level, Stage};
use crate::authn::UserInfo;

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub kind: &'static str,
    pub api_version: &'static str,
    pub level: Level,
    #[serde(rename = "auditID")]
    pub audit_id: String,
    pub stage: Stage,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    pub verb: String,
    pub user: EventUser,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<EventUser>,
    #[serde(rename = "sourceIPs", skip_serializing_if = "Vec::is_empty")]
    pub source_ips: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<ResponseStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_object: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_object: Option<Value>,
    #[serde(serialize_with = "micro_time")]
    pub request_received_timestamp: OffsetDateTime,
    #[serde(serialize_with = "micro_time")]
    pub stage_timestamp: OffsetDateTime,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// `authentication.k8s.io/v1` `UserInfo`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EventUser {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl From<&UserInfo> for EventUser {
    fn from(u: &UserInfo) -> Self {
        Self {
            username: u.name.clone(),
            uid: u.uid.clone(),
            groups: u.groups.clone(),
            extra: u.extra.clone(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

/// The bounded part of a `metav1.Status`: the code always; status, message, reason and
/// details when the response was a Status (an error).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ResponseStatus {
    /// Always `{}`, as Go writes the empty ListMeta.
    pub metadata: BTreeMap<String, Value>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub status: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    pub code: u16,
}

impl ResponseStatus {
    pub fn code(code: u16) -> Self {
        Self {
            code,
            ..Default::default()
        }
    }

    /// Copy what a returned `metav1.Status` says.
    pub fn from_status(code: u16, status: &Value) -> Self {
        let s = |k: &str| status[k].as_str().unwrap_or_default().to_owned();
        Self {
            metadata: BTreeMap::new(),
            status: s("status"),
            message: s("message"),
            reason: s("reason"),
            details: status.get("details").filter(|d| !d.is_null()).cloned(),
            code: status["code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(code),
        }
    }
}

/// `metav1.MicroTime`: RFC 3339 in UTC with microseconds, `2024-05-01T08:00:00.123456Z`.
pub fn format_micro_time(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.microsecond()
    )
}

fn micro_time<S: Serializer>(t: &OffsetDateTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_micro_time(*t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_time_is_upstreams() {
        let t = OffsetDateTime::from_unix_timestamp_nanos(1_700_000_000_123_456_789).unwrap();
        assert_eq!(format_micro_time(t), "2023-11-14T22:13:20.123456Z");
        let t = OffsetDateTime::from_unix_timestamp(0).unwrap();
        assert_eq!(format_micro_time(t), "1970-01-01T00:00:00.000000Z");
    }

    #[test]
    fn an_event_serializes_with_upstreams_fields() {
        let t = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        let ev = Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: Level::Metadata,
            audit_id: "a1".into(),
            stage: Stage::ResponseComplete,
            request_uri: "/api/v1/namespaces/default/configmaps?fieldManager=kubectl-create".into(),
            verb: "create".into(),
            user: EventUser {
                username: "admin".into(),
                groups: vec!["system:masters".into()],
                ..Default::default()
            },
            impersonated_user: None,
            source_ips: vec!["127.0.0.1".into()],
            user_agent: "kubectl/v1.33.0".into(),
            object_ref: Some(ObjectRef {
                resource: "configmaps".into(),
                namespace: "default".into(),
                name: "cm".into(),
                api_version: "v1".into(),
                ..Default::default()
            }),
            response_status: Some(ResponseStatus::code(201)),
            request_object: None,
            response_object: None,
            request_received_timestamp: t,
            stage_timestamp: t,
            annotations: [("authorization.k8s.io/decision".to_owned(), "allow".to_owned())].into(),
        };
        assert_eq!(
            serde_json::to_string(&ev).unwrap(),
            r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a1","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/default/configmaps?fieldManager=kubectl-create","verb":"create","user":{"username":"admin","groups":["system:masters"]},"sourceIPs":["127.0.0.1"],"userAgent":"kubectl/v1.33.0","objectRef":{"resource":"configmaps","namespace":"default","name":"cm","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":201},"requestReceivedTimestamp":"2023-11-14T22:13:20.000000Z","stageTimestamp":"2023-11-14T22:13:20.000000Z","annotations":{"authorization.k8s.io/decision":"allow"}}"#
        );
    }
}
