//! The `oidc` auth provider as kubectl's (client-go's `plugin/pkg/client/auth/oidc`): an
//! id-token that has expired (or will within ten seconds) is refreshed with the refresh-token
//! at the issuer's token endpoint (found through its OpenID discovery document), and the new
//! tokens are written back into the kubeconfig file that holds the user, so an identity
//! provider that rotates refresh tokens keeps working across runs. kube's own oidc support
//! refreshes in memory only; this runs first and leaves it a valid token.

use std::path::PathBuf;

use base64::Engine as _;
use http::{Method, Request};
use http_body_util::BodyExt;
use serde_json::{json, Value};

use crate::error::{msg, Result};

/// Seconds before its expiry an id-token is refreshed (client-go's `expiryDelta`).
const EXPIRY_DELTA: i64 = 10;

/// Whether `token` is a JWT whose `exp` is more than ten seconds away.
pub(crate) fn still_valid(token: &str, now: i64) -> bool {
    let Some(payload) = token.split('.').nth(1) else {
        return false;
    };
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let Ok(bytes) = engine.decode(payload) else {
        return false;
    };
    let exp = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|c| c["exp"].as_f64())
        .map(|e| e as i64);
    exp.is_some_and(|exp| now + EXPIRY_DELTA < exp)
}

/// A client for `url`'s origin trusting the provider's CA (or the system's).
async fn client_for(url: &str, ca_pem: Option<&[u8]>) -> Result<kube::Client> {
    let origin: String = {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| msg(format!("invalid URL {url:?}")))?;
        let host = rest.split('/').next().unwrap_or_default();
        format!("{scheme}://{host}")
    };
    let mut cluster = json!({"server": origin});
    if let Some(pem) = ca_pem {
        cluster["certificate-authority-data"] = json!(base64::engine::general_purpose::STANDARD.encode(pem));
    }
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "idp", "cluster": cluster}],
        "users": [{"name": "none", "user": {}}],
        "contexts": [{"name": "idp", "context": {"cluster": "idp", "user": "none"}}],
        "current-context": "idp",
    });
    let kubeconfig: kube::config::Kubeconfig =
        serde_json::from_value(kubeconfig).map_err(|e| msg(e.to_string()))?;
    let mut cfg = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| msg(format!("oidc: {e}")))?;
    cfg.proxy_url = None;
    kube::Client::try_from(cfg).map_err(|e| msg(format!("oidc: {e}")))
}

/// The path and query of `url` (what goes after its origin).
fn path_of(url: &str) -> String {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    match rest.find('/') {
        Some(i) => rest[i..].to_string(),
        None => "/".into(),
    }
}

async fn send(client: &kube::Client, req: Request<Vec<u8>>) -> Result<(u16, Vec<u8>)> {
    let (parts, body) = req.into_parts();
    let req = Request::from_parts(parts, kube::client::Body::from(body));
    let resp = client.send(req).await.map_err(|e| msg(format!("oidc: {e}")))?;
    let code = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| msg(format!("oidc: {e}")))?
        .to_bytes();
    Ok((code, bytes.to_vec()))
}

fn form_escape(s: &str) -> String {
    // application/x-www-form-urlencoded, as Go's url.QueryEscape.
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            b' ' => "+".into(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Refresh the current user's oidc tokens when its id-token is no longer good, in `config`
/// (the merged kubeconfig) and in the file among `files` that defines the user.
pub async fn refresh(files: &[PathBuf], user_name: &str, config: &mut Value) -> Result<()> {
    let Some(user) = config["users"]
        .as_array_mut()
        .and_then(|u| u.iter_mut().find(|u| u["name"] == user_name))
    else {
        return Ok(());
    };
    let provider = &mut user["user"]["auth-provider"];
    if provider["name"] != "oidc" {
        return Ok(());
    }
    let c = &provider["config"];
    let get = |k: &str| c[k].as_str().filter(|v| !v.is_empty()).map(str::to_owned);
    let now = jiff::Timestamp::now().as_second();
    if get("id-token").is_some_and(|t| still_valid(&t, now)) {
        return Ok(());
    }
    let (Some(issuer), Some(client_id), Some(refresh_token)) =
        (get("idp-issuer-url"), get("client-id"), get("refresh-token"))
    else {
        // Nothing to refresh with: the token goes as it is and the server judges it.
        return Ok(());
    };
    let secret = get("client-secret").unwrap_or_default();
    let ca = match (
        get("idp-certificate-authority-data"),
        get("idp-certificate-authority"),
    ) {
        (Some(data), _) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .map_err(|e| msg(format!("oidc: idp-certificate-authority-data: {e}")))?,
        ),
        (None, Some(file)) => Some(std::fs::read(&file).map_err(|e| msg(format!("oidc: {file}: {e}")))?),
        _ => None,
    };
    let issuer = issuer.trim_end_matches('/').to_string();
    let discovery_url = format!("{issuer}/.well-known/openid-configuration");
    let client = client_for(&discovery_url, ca.as_deref()).await?;
    let req = Request::builder()
        .method(Method::GET)
        .uri(path_of(&discovery_url))
        .body(Vec::new())
        .map_err(|e| msg(e.to_string()))?;
    let (code, body) = send(&client, req).await?;
    if code != 200 {
        return Err(msg(format!("oidc: discovery at {discovery_url} answered {code}")));
    }
    let endpoint = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|d| d["token_endpoint"].as_str().map(str::to_owned))
        .ok_or_else(|| msg("oidc: the provider's discovery document names no token_endpoint"))?;
    let client = client_for(&endpoint, ca.as_deref()).await?;
    // oauth2's auto-detection: client credentials in a Basic header first, then in the form.
    let mut answer = None;
    for in_header in [true, false] {
        let mut form = format!(
            "grant_type=refresh_token&refresh_token={}",
            form_escape(&refresh_token)
        );
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(path_of(&endpoint))
            .header(http::header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        if in_header {
            let basic = base64::engine::general_purpose::STANDARD.encode(format!(
                "{}:{}",
                form_escape(&client_id),
                form_escape(&secret)
            ));
            req = req.header(http::header::AUTHORIZATION, format!("Basic {basic}"));
        } else {
            form.push_str(&format!("&client_id={}", form_escape(&client_id)));
            if !secret.is_empty() {
                form.push_str(&format!("&client_secret={}", form_escape(&secret)));
            }
        }
        let req = req.body(form.into_bytes()).map_err(|e| msg(e.to_string()))?;
        let (code, body) = send(&client, req).await?;
        if (200..300).contains(&code) {
            answer = Some(body);
            break;
        }
    }
    let body = answer.ok_or_else(|| msg("oidc: the token endpoint refused the refresh token"))?;
    let tokens: Value =
        serde_json::from_slice(&body).map_err(|e| msg(format!("oidc: token response: {e}")))?;
    if tokens["access_token"].as_str().is_none_or(str::is_empty) {
        return Err(crate::error::Error::Raw(
            "Unable to connect to the server: failed to refresh token: oauth2: server response missing access_token".into(),
        ));
    }
    let id_token = tokens["id_token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| msg("token response did not contain an id_token, either the scope \"openid\" wasn't requested upon login, or the provider doesn't support id_tokens as part of the refresh response"))?
        .to_string();
    let new_refresh = tokens["refresh_token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(str::to_owned);
    let apply = |cfg: &mut Value| {
        cfg["id-token"] = json!(id_token);
        if let Some(r) = &new_refresh {
            cfg["refresh-token"] = json!(r);
        }
    };
    apply(&mut provider["config"]);
    // Persist into the first file that defines this user (where the merge took it from).
    for file in files {
        let mut doc = crate::kubeconfig_edit::read(file)?;
        let Some(entry) = doc["users"]
            .as_array_mut()
            .and_then(|u| u.iter_mut().find(|u| u["name"] == user_name))
        else {
            continue;
        };
        if entry["user"]["auth-provider"]["name"] == "oidc" {
            apply(&mut entry["user"]["auth-provider"]["config"]);
            crate::kubeconfig_edit::write(file, &mut doc)?;
        }
        break;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(exp: i64) -> String {
        let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        format!(
            "{}.{}.sig",
            b64(&json!({"alg": "none"})),
            b64(&json!({"exp": exp}))
        )
    }

    #[test]
    fn tokens_are_refreshed_ten_seconds_before_they_expire() {
        assert!(still_valid(&jwt(1000), 900));
        assert!(!still_valid(&jwt(1000), 995));
        assert!(!still_valid(&jwt(1000), 2000));
        assert!(!still_valid("not-a-jwt", 0));
        assert_eq!(form_escape("a b/c+d"), "a+b%2Fc%2Bd");
        assert_eq!(
            path_of("https://idp.example/realms/x/token?a=1"),
            "/realms/x/token?a=1"
        );
        assert_eq!(path_of("https://idp.example"), "/");
    }
}
