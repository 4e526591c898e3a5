//! The on-disk form of one revision in the log table.
//!
//! A fixed little-endian layout (kind, create revision, version, previous revision, key length,
//! key, value): written by hand because it is 40 lines and keeps the hot write path free of a
//! serialisation framework.

use bytes::Bytes;

use crate::{KeyValue, Revision};

const PUT: u8 = 1;
const DELETE: u8 = 2;
const HEADER: usize = 1 + 8 + 8 + 8 + 4;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub key: String,
    pub value: Bytes,
    pub tombstone: bool,
    pub create_revision: Revision,
    pub version: i64,
    /// The key's previous write (0 if this write created it).
    pub prev_revision: Revision,
}

impl Record {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.key.len() + self.value.len());
        out.push(if self.tombstone { DELETE } else { PUT });
        out.extend_from_slice(&self.create_revision.to_le_bytes());
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.prev_revision.to_le_bytes());
        out.extend_from_slice(&(self.key.len() as u32).to_le_bytes());
        out.extend_from_slice(self.key.as_bytes());
        out.extend_from_slice(&self.value);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() < HEADER {
            return Err(format!("log record of {} bytes is truncated", bytes.len()));
        }
        let tombstone = match bytes[0] {
            PUT => false,
            DELETE => true,
            other => return Err(format!("log record has unknown kind {other}")),
        };
        let i64_at = |at: usize| i64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let key_len = u32::from_le_bytes(bytes[25..29].try_into().expect("4 bytes")) as usize;
        let key_end = HEADER + key_len;
        if bytes.len() < key_end {
            return Err("log record key runs past its end".to_owned());
        }
        let key = std::str::from_utf8(&bytes[HEADER..key_end])
            .map_err(|_| "log record key is not UTF-8".to_owned())?
            .to_owned();
        Ok(Record {
            key,
            value: Bytes::copy_from_slice(&bytes[key_end..]),
            tombstone,
            create_revision: i64_at(1),
            version: i64_at(9),
            prev_revision: i64_at(17),
        })
    }

    /// The key-value this record wrote at `revision` (for a deletion, etcd's form: key and
    /// revision only).
    pub fn into_kv(self, revision: Revision) -> KeyValue {
        if self.tombstone {
            KeyValue {
                key: self.key,
                value: Bytes::new(),
                create_revision: 0,
                mod_revision: revision,
                version: 0,
            }
        } else {
            KeyValue {
                key: self.key,
                value: self.value,
                create_revision: self.create_revision,
                mod_revision: revision,
                version: self.version,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let r = Record {
            key: "/registry/pods/default/nginx".into(),
            value: Bytes::from_static(b"{\"kind\":\"Pod\"}"),
            tombstone: false,
            create_revision: 7,
            version: 3,
            prev_revision: 9,
        };
        assert_eq!(Record::decode(&r.encode()).unwrap(), r);
        let d = Record {
            tombstone: true,
            value: Bytes::new(),
            ..r
        };
        assert_eq!(Record::decode(&d.encode()).unwrap(), d);
    }

    #[test]
    fn rejects_garbage() {
        assert!(Record::decode(b"\x01abc").is_err());
        let mut bad = Record {
            key: "k".into(),
            value: Bytes::new(),
            tombstone: false,
            create_revision: 1,
            version: 1,
            prev_revision: 0,
        }
        .encode();
        bad[0] = 9;
        assert!(Record::decode(&bad).unwrap_err().contains("unknown kind"));
    }
}
