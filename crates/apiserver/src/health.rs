//! `/healthz`, `/livez` and `/readyz`: named checks, `?verbose` lists each, `/readyz/<check>`
//! runs one, failure is 500 — as upstream.

use std::time::Duration;

use http::{Response, StatusCode};

use crate::context::Ctx;
use crate::http::{text_response, Body};

/// The datastore check: a cheap read with a deadline.
async fn check_store(ctx: &Ctx) -> Result<(), String> {
    match tokio::time::timeout(Duration::from_secs(2), ctx.shared.store.current_revision()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the datastore did not answer within 2s".into()),
    }
}

pub(crate) async fn route(ctx: &Ctx, path: &str) -> Option<Response<Body>> {
    let (endpoint, only) = ["/healthz", "/livez", "/readyz"].iter().find_map(|e| {
        if path == *e {
            Some((*e, None))
        } else {
            path.strip_prefix(e)
                .and_then(|rest| rest.strip_prefix('/'))
                .map(|check| (*e, Some(check.to_owned())))
        }
    })?;
    let name = &endpoint[1..];
    let mut results: Vec<(&str, Result<(), String>)> = vec![("ping", Ok(()))];
    results.push(("etcd", check_store(ctx).await));
    if let Some(only) = only {
        return Some(match results.iter().find(|(n, _)| *n == only) {
            Some((_, Ok(()))) => text_response(StatusCode::OK, "ok".into()),
            Some((n, Err(_))) => text_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal server error: {n} check failed\n"),
            ),
            None => text_response(StatusCode::NOT_FOUND, "404 page not found\n".into()),
        });
    }
    let verbose = ctx
        .query
        .as_deref()
        .unwrap_or("")
        .split('&')
        .any(|kv| kv == "verbose" || kv.starts_with("verbose="));
    let failed = results.iter().any(|(_, r)| r.is_err());
    for (n, r) in &results {
        if let Err(e) = r {
            tracing::warn!(check = n, error = %e, "{name} check failed");
        }
    }
    if !verbose && !failed {
        return Some(text_response(StatusCode::OK, "ok".into()));
    }
    let mut text = String::new();
    for (n, r) in &results {
        match r {
            Ok(()) => text.push_str(&format!("[+]{n} ok\n")),
            Err(_) => text.push_str(&format!("[-]{n} failed: reason withheld\n")),
        }
    }
    if failed {
        text.push_str(&format!("{name} check failed\n"));
        Some(text_response(StatusCode::INTERNAL_SERVER_ERROR, text))
    } else {
        text.push_str(&format!("{name} check passed\n"));
        Some(text_response(StatusCode::OK, text))
    }
}
