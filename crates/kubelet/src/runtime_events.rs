//! What wakes the PLEG between its relists: the runtime's own stream of container events.
//!
//! Upstream's evented PLEG reads CRI's `GetContainerEvents` (containerd 1.7 and later) and
//! relists only every few minutes as a safety net. containerd 1.6, which r8s runs, has no such
//! CRI call, but its own events service publishes every task's start, exit and OOM on the same
//! socket: the kubelet asks CRI first and containerd second, and with neither it relists every
//! second as the generic PLEG does. An event is only a prompt to relist (the relist decides what
//! changed), so both streams serve alike, and a runtime with neither loses nothing but idle CPU.

use std::pin::Pin;

use futures::{Stream, StreamExt};
use k8s_cri::v1 as cri;

use crate::cri::Cri;
use crate::Error;

/// A stream that yields once for each change the runtime reports, and ends when the runtime
/// stops reporting (the subscription broke).
pub type Changes = Pin<Box<dyn Stream<Item = ()> + Send>>;

/// The runtime's change stream: CRI's container events if it has them, else containerd's task
/// and container events, else why neither.
pub async fn subscribe(cri: &Cri) -> Result<Changes, Error> {
    let mut rt = cri.runtime.clone();
    let cri_error = match rt.get_container_events(cri::GetEventsRequest {}).await {
        Ok(stream) => {
            tracing::info!("PLEG: relisting on the runtime's CRI container events");
            return Ok(ended_by_errors(stream.into_inner()));
        }
        Err(e) => e,
    };
    match containerd::subscribe(cri).await {
        Ok(stream) => {
            tracing::info!(
                "PLEG: relisting on containerd's task events (the runtime has no CRI container events)"
            );
            Ok(ended_by_errors(stream))
        }
        Err(e) => Err(Error::Other(format!(
            "no runtime events: CRI GetContainerEvents: {}; containerd events: {}",
            cri_error.message(),
            crate::runtime::message(&e),
        ))),
    }
}

/// `()` per event, until the first error.
fn ended_by_errors<T: Send + 'static>(
    stream: impl Stream<Item = Result<T, tonic::Status>> + Send + 'static,
) -> Changes {
    Box::pin(stream.take_while(|r| std::future::ready(r.is_ok())).map(|_| ()))
}

/// containerd's events service (`containerd.services.events.v1.Events`), which containerd 1.6
/// serves on its socket beside CRI.
///
/// Written by hand: `containerd-client` (rust-extensions) compiles containerd's whole API, some
/// thirty protos, on every build; the kubelet needs one streaming call of two messages, whose
/// fields are containerd's `api/services/events/v1/events.proto` and `api/types/event.proto`.
mod containerd {
    use super::*;

    /// Only the containers CRI runs: their namespace, and the topics that tell of a task or a
    /// container coming or going (containerd's filter syntax; filters are or-ed).
    const FILTERS: &[&str] = &[
        r#"namespace=="k8s.io",topic~="^/tasks/""#,
        r#"namespace=="k8s.io",topic~="^/containers/""#,
    ];

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SubscribeRequest {
        #[prost(string, repeated, tag = "1")]
        pub filters: Vec<String>,
    }

    /// An event: the kubelet reads where and what it was; the timestamp (field 1) and the
    /// event itself (field 4, an `Any`) are skipped as unknown fields.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Envelope {
        #[prost(string, tag = "2")]
        pub namespace: String,
        #[prost(string, tag = "3")]
        pub topic: String,
    }

    pub async fn subscribe(
        cri: &Cri,
    ) -> Result<impl Stream<Item = Result<Envelope, tonic::Status>> + Send + 'static, Error> {
        let mut grpc = tonic::client::Grpc::new(cri.channel());
        grpc.ready()
            .await
            .map_err(|e| Error::Other(format!("containerd events: {e}")))?;
        let path = http::uri::PathAndQuery::from_static("/containerd.services.events.v1.Events/Subscribe");
        let request = SubscribeRequest {
            filters: FILTERS.iter().map(|f| f.to_string()).collect(),
        };
        let codec = tonic_prost::ProstCodec::<SubscribeRequest, Envelope>::default();
        let stream = grpc
            .server_streaming(tonic::Request::new(request), path, codec)
            .await?
            .into_inner();
        Ok(stream)
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use prost::Message;

        #[test]
        fn envelopes_decode_as_containerd_encodes_them() {
            // An Envelope as containerd's Go encoder writes it: timestamp, namespace, topic,
            // and the event as an Any.
            let mut wire = Vec::new();
            // timestamp {seconds: 1, nanos: 2}
            wire.extend([0x0a, 4, 0x08, 1, 0x10, 2]);
            wire.extend([0x12, 6]);
            wire.extend(b"k8s.io");
            wire.extend([0x1a, 11]);
            wire.extend(b"/tasks/exit");
            // event: Any {type_url: "containerd.events.TaskExit", value: TaskExit{container_id: "c"}}
            let url = b"containerd.events.TaskExit";
            wire.extend([0x22, (2 + url.len() + 2 + 3) as u8, 0x0a, url.len() as u8]);
            wire.extend(url);
            wire.extend([0x12, 3, 0x0a, 1, b'c']);
            let e = Envelope::decode(wire.as_slice()).unwrap();
            assert_eq!(
                (e.namespace.as_str(), e.topic.as_str()),
                ("k8s.io", "/tasks/exit")
            );
            // The request carries the filters as field 1, repeated.
            let req = SubscribeRequest {
                filters: vec!["a".into(), "b".into()],
            }
            .encode_to_vec();
            assert_eq!(req, vec![0x0a, 1, b'a', 0x0a, 1, b'b']);
        }
    }
}
