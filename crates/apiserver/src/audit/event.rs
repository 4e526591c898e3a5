//! `audit.k8s.io/v1` `Event`, serialized with upstream's field names and order.
//!
//! A request's event is a [`Record`]: who asked and from where is encoded once, when the
//! request begins (it is the same at every stage), and the rest at each stage. [`Event`], the
//! whole event as a serializable struct, is the tests' model of what a line must be.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Serialize, Serializer};
use serde_json::Value;
use time::OffsetDateTime;

use super::policy::{Level, Stage};
use crate::authn::UserInfo;

#[cfg(test)]
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

/// The fields from `requestURI` to `user`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Who<'a> {
    #[serde(rename = "requestURI")]
    request_uri: &'a str,
    verb: &'a str,
    user: UserView<'a>,
}

/// `sourceIPs` and `userAgent`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Source<'a> {
    #[serde(rename = "sourceIPs", skip_serializing_if = "<[_]>::is_empty")]
    source_ips: &'a [IpAddr],
    #[serde(skip_serializing_if = "str::is_empty")]
    user_agent: &'a str,
}

/// `authentication.k8s.io/v1` `UserInfo` as an event has it.
#[derive(Serialize)]
struct UserView<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    username: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    uid: &'a str,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    groups: &'a [String],
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    extra: &'a BTreeMap<String, Vec<String>>,
}

impl<'a> UserView<'a> {
    fn of(u: &'a UserInfo) -> Self {
        Self {
            username: &u.name,
            uid: &u.uid,
            groups: &u.groups,
            extra: &u.extra,
        }
    }
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

/// One request's event: what may change between its stages, and who asked and from where,
/// encoded when the request began.
#[derive(Debug)]
pub struct Record {
    audit_id: String,
    pub stage: Stage,
    /// `{"kind":"Event","apiVersion":…,"level":…,"auditID":…,"stage":`.
    head: Vec<u8>,
    /// `"requestURI":…,"verb":…,"user":{…}`.
    who: Vec<u8>,
    /// `,"impersonatedUser":{…}`, or nothing.
    impersonated: Vec<u8>,
    /// `,"sourceIPs":[…],"userAgent":…`, each only when there is one.
    from: Vec<u8>,
    object_ref: Option<ObjectRef>,
    /// `,"objectRef":{…}` once encoded (or nothing when there is no objectRef).
    object_ref_json: Option<Vec<u8>>,
    pub response_status: Option<ResponseStatus>,
    pub request_object: Option<Value>,
    pub response_object: Option<Value>,
    pub request_received_timestamp: OffsetDateTime,
    pub stage_timestamp: OffsetDateTime,
    annotations: BTreeMap<String, String>,
    /// `,"annotations":{…}` once encoded (or nothing when there are none).
    annotations_json: Option<Vec<u8>>,
    /// The body of a create or update whose metadata is to name the objectRef, until it is
    /// read (see `RequestAudit::request_body`).
    pub unnamed_body: Option<bytes::Bytes>,
}

/// Who made a request and how, as a [`Record`] is begun with.
pub struct Request<'a> {
    pub request_uri: &'a str,
    pub verb: &'a str,
    pub user: &'a UserInfo,
    pub source_ips: &'a [IpAddr],
    pub user_agent: &'a str,
}

impl Record {
    /// A request's event at stage RequestReceived.
    pub fn new(
        level: Level,
        audit_id: String,
        received: OffsetDateTime,
        request: &Request<'_>,
        object_ref: Option<ObjectRef>,
    ) -> serde_json::Result<Self> {
        let mut who = Vec::with_capacity(256);
        members(
            &mut who,
            &Who {
                request_uri: request.request_uri,
                verb: request.verb,
                user: UserView::of(request.user),
            },
        )?;
        let mut from = Vec::with_capacity(96);
        if !request.source_ips.is_empty() || !request.user_agent.is_empty() {
            from.push(b',');
            members(
                &mut from,
                &Source {
                    source_ips: request.source_ips,
                    user_agent: request.user_agent,
                },
            )?;
        }
        let mut head = Vec::with_capacity(128);
        head.extend_from_slice(br#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":""#);
        head.extend_from_slice(level.as_str().as_bytes());
        head.extend_from_slice(br#"","auditID":"#);
        serde_json::to_writer(&mut head, &audit_id)?;
        head.extend_from_slice(br#","stage":"#);
        Ok(Self {
            audit_id,
            stage: Stage::RequestReceived,
            head,
            who,
            impersonated: Vec::new(),
            from,
            object_ref,
            object_ref_json: None,
            response_status: None,
            request_object: None,
            response_object: None,
            request_received_timestamp: received,
            stage_timestamp: received,
            annotations: BTreeMap::new(),
            annotations_json: None,
            unnamed_body: None,
        })
    }

    /// The request acts as `user`.
    pub fn impersonated(&mut self, user: &UserInfo) -> serde_json::Result<()> {
        let mut out = br#","impersonatedUser":"#.to_vec();
        serde_json::to_writer(&mut out, &UserView::of(user))?;
        self.impersonated = out;
        Ok(())
    }

    /// The objectRef, to be changed (its encoding is redone at the next stage).
    pub fn object_ref_mut(&mut self) -> Option<&mut ObjectRef> {
        self.object_ref_json = None;
        self.object_ref.as_mut()
    }

    /// The request's audit ID.
    pub fn audit_id(&self) -> &str {
        &self.audit_id
    }

    /// The annotations so far.
    pub fn annotations(&self) -> &BTreeMap<String, String> {
        &self.annotations
    }

    /// Annotate the event; a key already set keeps its value, which is returned when it
    /// differs from `value`.
    pub fn annotate(&mut self, key: &str, value: &str) -> Option<&str> {
        if self.annotations.contains_key(key) {
            return self
                .annotations
                .get(key)
                .map(String::as_str)
                .filter(|v| *v != value);
        }
        self.annotations.insert(key.to_owned(), value.to_owned());
        self.annotations_json = None;
        None
    }

    /// Append the event as it is now as one JSON line: the same text as serializing the
    /// whole [`Event`].
    pub fn write_line(&mut self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        if self.object_ref_json.is_none() {
            let mut json = Vec::with_capacity(192);
            if let Some(r) = &self.object_ref {
                json.extend_from_slice(br#","objectRef":"#);
                serde_json::to_writer(&mut json, r)?;
            }
            self.object_ref_json = Some(json);
        }
        if self.annotations_json.is_none() {
            let mut json = Vec::with_capacity(256);
            if !self.annotations.is_empty() {
                json.extend_from_slice(br#","annotations":"#);
                serde_json::to_writer(&mut json, &self.annotations)?;
            }
            self.annotations_json = Some(json);
        }
        out.extend_from_slice(&self.head);
        out.push(b'"');
        out.extend_from_slice(self.stage.as_str().as_bytes());
        out.extend_from_slice(b"\",");
        out.extend_from_slice(&self.who);
        out.extend_from_slice(&self.impersonated);
        out.extend_from_slice(&self.from);
        out.extend_from_slice(self.object_ref_json.as_deref().unwrap_or_default());
        out.push(b',');
        members(
            out,
            &Tail {
                response_status: self.response_status.as_ref(),
                request_object: self.request_object.as_ref(),
                response_object: self.response_object.as_ref(),
                request_received_timestamp: &self.request_received_timestamp,
                stage_timestamp: &self.stage_timestamp,
            },
        )?;
        out.extend_from_slice(self.annotations_json.as_deref().unwrap_or_default());
        out.extend_from_slice(b"}\n");
        Ok(())
    }
}

/// `authentication.k8s.io/v1` `UserInfo` (the tests' model).
#[cfg(test)]
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

#[cfg(test)]
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

    /// The record a request with `ev`'s fields begins, brought to `ev`'s stage.
    fn record_of(ev: &Event) -> Record {
        let user_info = |u: &EventUser| UserInfo {
            name: u.username.clone(),
            uid: u.uid.clone(),
            groups: u.groups.clone(),
            extra: u.extra.clone(),
        };
        let ips: Vec<IpAddr> = ev.source_ips.iter().map(|ip| ip.parse().unwrap()).collect();
        let mut r = Record::new(
            ev.level,
            ev.audit_id.clone(),
            ev.request_received_timestamp,
            &Request {
                request_uri: &ev.request_uri,
                verb: &ev.verb,
                user: &user_info(&ev.user),
                source_ips: &ips,
                user_agent: &ev.user_agent,
            },
            ev.object_ref.clone(),
        )
        .unwrap();
        if let Some(u) = &ev.impersonated_user {
            r.impersonated(&user_info(u)).unwrap();
        }
        r.stage = ev.stage;
        r.stage_timestamp = ev.stage_timestamp;
        r.response_status = ev.response_status.clone();
        r.request_object = ev.request_object.clone();
        r.response_object = ev.response_object.clone();
        for (k, v) in &ev.annotations {
            r.annotate(k, v);
        }
        r
    }

    #[test]
    fn a_record_writes_the_serialized_event() {
        let check = |ev: &Event| {
            let mut line = Vec::new();
            record_of(ev).write_line(&mut line).unwrap();
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
        ev.source_ips = vec!["10.0.0.1".into(), "::1".into()];
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
        check(&ev);
        ev.source_ips = vec!["127.0.0.1".into()];
        check(&ev);
        ev.source_ips.clear();
        ev.user_agent = "ua".into();
        check(&ev);
        ev.object_ref = None;
        ev.response_status = None;
        ev.request_object = None;
        ev.response_object = None;
        ev.annotations.clear();
        ev.verb.clear();
        ev.user = EventUser::default();
        check(&ev);
    }

    #[test]
    fn annotations_added_after_a_stage_appear_in_the_next_and_the_first_value_stays() {
        let mut ev = sample();
        ev.annotations.clear();
        let mut r = record_of(&ev);
        let annotations = |r: &mut Record| {
            let mut line = Vec::new();
            r.write_line(&mut line).unwrap();
            serde_json::from_slice::<Value>(&line).unwrap()["annotations"].clone()
        };
        assert_eq!(annotations(&mut r), Value::Null);
        assert_eq!(r.annotate("a", "1"), None);
        assert_eq!(annotations(&mut r), serde_json::json!({"a": "1"}));
        assert_eq!(r.annotate("a", "2"), Some("1"), "the existing value is reported");
        assert_eq!(r.annotate("a", "1"), None, "the same value again is no conflict");
        assert_eq!(r.annotate("b", "\"q\""), None);
        assert_eq!(annotations(&mut r), serde_json::json!({"a": "1", "b": "\"q\""}));
    }

    #[test]
    fn a_changed_object_ref_is_encoded_again() {
        let ev = sample();
        let mut r = record_of(&ev);
        let mut first = Vec::new();
        r.write_line(&mut first).unwrap();
        r.object_ref_mut().unwrap().name = "other".into();
        let mut second = Vec::new();
        r.write_line(&mut second).unwrap();
        let name = |line: &[u8]| serde_json::from_slice::<Value>(line).unwrap()["objectRef"]["name"].clone();
        assert_eq!((name(&first), name(&second)), ("cm".into(), "other".into()));
    }
}
