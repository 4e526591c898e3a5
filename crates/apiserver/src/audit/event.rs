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

/// The fields from `requestURI` to `objectRef`: the same at every stage of most requests.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Middle<'a> {
    #[serde(rename = "requestURI")]
    request_uri: &'a str,
    verb: &'a str,
    user: &'a EventUser,
    #[serde(skip_serializing_if = "Option::is_none")]
    impersonated_user: Option<&'a EventUser>,
    #[serde(rename = "sourceIPs", skip_serializing_if = "<[_]>::is_empty")]
    source_ips: &'a [String],
    #[serde(skip_serializing_if = "str::is_empty")]
    user_agent: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    object_ref: Option<&'a ObjectRef>,
}

/// The fields after `objectRef`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Tail<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    response_status: Option<&'a ResponseStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_object: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_object: Option<&'a Value>,
    #[serde(serialize_with = "micro_time_ref")]
    request_received_timestamp: &'a OffsetDateTime,
    #[serde(serialize_with = "micro_time_ref")]
    stage_timestamp: &'a OffsetDateTime,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    annotations: &'a BTreeMap<String, String>,
}

/// The members of a JSON object, without its braces.
fn members(out: &mut Vec<u8>, value: &impl Serialize) -> serde_json::Result<()> {
    let start = out.len();
    serde_json::to_writer(&mut *out, value)?;
    // `{…}`: drop the closing brace, then the opening one.
    out.pop();
    out.remove(start);
    Ok(())
}

impl Event {
    /// The JSON of the fields from `requestURI` to `objectRef` (see [`Event::write_line`]).
    pub fn middle_json(&self) -> serde_json::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(512);
        members(
            &mut out,
            &Middle {
                request_uri: &self.request_uri,
                verb: &self.verb,
                user: &self.user,
                impersonated_user: self.impersonated_user.as_ref(),
                source_ips: &self.source_ips,
                user_agent: &self.user_agent,
                object_ref: self.object_ref.as_ref(),
            },
        )?;
        Ok(out)
    }

    /// Append the event as one JSON line (the same text as serializing it), with `middle`
    /// from [`Event::middle_json`], which a request writing several stages encodes once.
    pub fn write_line(&self, middle: &[u8], out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.extend_from_slice(br#"{"kind":"#);
        serde_json::to_writer(&mut *out, self.kind)?;
        out.extend_from_slice(br#","apiVersion":"#);
        serde_json::to_writer(&mut *out, self.api_version)?;
        out.extend_from_slice(br#","level":"#);
        serde_json::to_writer(&mut *out, &self.level)?;
        out.extend_from_slice(br#","auditID":"#);
        serde_json::to_writer(&mut *out, &self.audit_id)?;
        out.extend_from_slice(br#","stage":"#);
        serde_json::to_writer(&mut *out, &self.stage)?;
        out.push(b',');
        out.extend_from_slice(middle);
        out.push(b',');
        members(
            out,
            &Tail {
                response_status: self.response_status.as_ref(),
                request_object: self.request_object.as_ref(),
                response_object: self.response_object.as_ref(),
                request_received_timestamp: &self.request_received_timestamp,
                stage_timestamp: &self.stage_timestamp,
                annotations: &self.annotations,
            },
        )?;
        out.extend_from_slice(b"}\n");
        Ok(())
    }
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
    let buf = micro_time_bytes(t);
    String::from_utf8_lossy(&buf).into_owned()
}

/// The same text in a buffer on the stack: two of them in every audit event.
fn micro_time_bytes(t: OffsetDateTime) -> [u8; 27] {
    let t = t.to_offset(time::UtcOffset::UTC);
    let mut buf = *b"0000-00-00T00:00:00.000000Z";
    let mut put = |at: usize, width: usize, mut v: u32| {
        for i in (at..at + width).rev() {
            buf[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    // Years before 0 or after 9999 do not occur in an audit log; they are clamped.
    put(0, 4, t.year().clamp(0, 9999) as u32);
    put(5, 2, u8::from(t.month()).into());
    put(8, 2, t.day().into());
    put(11, 2, t.hour().into());
    put(14, 2, t.minute().into());
    put(17, 2, t.second().into());
    put(20, 6, t.microsecond());
    buf
}

fn micro_time_ref<S: Serializer>(t: &&OffsetDateTime, s: S) -> Result<S::Ok, S::Error> {
    micro_time(t, s)
}

fn micro_time<S: Serializer>(t: &OffsetDateTime, s: S) -> Result<S::Ok, S::Error> {
    let buf = micro_time_bytes(*t);
    // Only ASCII digits and separators were written.
    s.serialize_str(std::str::from_utf8(&buf).unwrap_or_default())
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
        let t = OffsetDateTime::from_unix_timestamp_nanos(4_102_444_799_999_999_000).unwrap();
        assert_eq!(format_micro_time(t), "2099-12-31T23:59:59.999999Z");
        // Another offset is written in UTC.
        let t = OffsetDateTime::from_unix_timestamp(1_700_000_000)
            .unwrap()
            .to_offset(time::UtcOffset::from_hms(2, 0, 0).unwrap());
        assert_eq!(format_micro_time(t), "2023-11-14T22:13:20.000000Z");
    }

    fn sample() -> Event {
        let t = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        Event {
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
        }
    }

    #[test]
    fn an_event_serializes_with_upstreams_fields() {
        let ev = sample();
        assert_eq!(
            serde_json::to_string(&ev).unwrap(),
            r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a1","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/default/configmaps?fieldManager=kubectl-create","verb":"create","user":{"username":"admin","groups":["system:masters"]},"sourceIPs":["127.0.0.1"],"userAgent":"kubectl/v1.33.0","objectRef":{"resource":"configmaps","namespace":"default","name":"cm","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":201},"requestReceivedTimestamp":"2023-11-14T22:13:20.000000Z","stageTimestamp":"2023-11-14T22:13:20.000000Z","annotations":{"authorization.k8s.io/decision":"allow"}}"#
        );
    }

    #[test]
    fn a_line_written_in_parts_is_the_serialized_event() {
        let check = |ev: &Event| {
            let mut line = Vec::new();
            ev.write_line(&ev.middle_json().unwrap(), &mut line).unwrap();
            let mut expected = serde_json::to_vec(ev).unwrap();
            expected.push(b'\n');
            assert_eq!(
                String::from_utf8(line).unwrap(),
                String::from_utf8(expected).unwrap()
            );
        };
        let mut ev = sample();
        check(&ev);
        // Every optional field present, strings that need escaping, then every one absent.
        ev.impersonated_user = Some(EventUser {
            username: "jane".into(),
            uid: "u\"1".into(),
            groups: vec!["g".into()],
            extra: [("scopes".to_owned(), vec!["a\nb".to_owned()])].into(),
        });
        ev.request_object = Some(serde_json::json!({"kind": "Pod", "spec": {"x": [1, 2]}}));
        ev.response_object = Some(serde_json::json!({"kind": "Pod"}));
        ev.response_status = Some(ResponseStatus::from_status(
            409,
            &serde_json::json!({"status": "Failure", "message": "conflict \"x\"", "reason": "Conflict", "code": 409, "details": {"name": "x"}}),
        ));
        ev.user_agent = "agent \u{1} ✓".into();
        check(&ev);
        ev.impersonated_user = None;
        ev.source_ips.clear();
        ev.user_agent.clear();
        ev.object_ref = None;
        ev.response_status = None;
        ev.request_object = None;
        ev.response_object = None;
        ev.annotations.clear();
        ev.verb.clear();
        check(&ev);
    }
}
