//! `/openapi/v3` and `/openapi/v2`.
//!
//! Not yet the full documents: the v3 discovery lists no group versions and v2 is an empty
//! (protobuf) document, which tells clients the server publishes no schemas, so kubectl
//! validates nothing on the client side and falls back to its built-in type information for
//! strategic merge patches. Generating the real documents from the type definitions is the
//! next step of the API server issue.

use http::{header, HeaderMap, Response, StatusCode};
use serde_json::json;

use crate::handler::{full, json_response, Body};

pub(crate) fn route(path: &str, _headers: &HeaderMap) -> Option<Response<Body>> {
    match path {
        "/openapi/v3" => Some(json_response(StatusCode::OK, &json!({"paths": {}}))),
        // An empty OpenAPI v2 document in the protobuf encoding clients ask for (a message with
        // no fields is zero bytes).
        "/openapi/v2" => Some(
            Response::builder()
                .status(StatusCode::OK)
                .header(
                    header::CONTENT_TYPE,
                    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                )
                .body(full(Vec::<u8>::new()))
                .expect("valid response"),
        ),
        _ => None,
    }
}
