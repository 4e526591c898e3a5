//! What a request is about, parsed from its method, path and query as Kubernetes'
//! `RequestInfoFactory` does: the attributes that authorization, admission and the handlers use.

/// The parsed request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// `/api/...` or `/apis/...` with a resource; false for `/healthz`, `/version`, discovery.
    pub is_resource_request: bool,
    pub path: String,
    /// Kubernetes verb: get, list, watch, create, update, patch, delete, deletecollection for
    /// resources; the lower-cased HTTP method otherwise.
    pub verb: String,
    /// "api" or "apis".
    pub prefix: String,
    pub api_group: String,
    pub api_version: String,
    pub namespace: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    /// Path segments after the API prefix (e.g. `["v1", "namespaces", "default", "pods"]`).
    pub parts: Vec<String>,
}

/// Parse a request. `query` is the raw query string (without `?`).
pub fn parse_request(method: &http::Method, path: &str, query: Option<&str>) -> RequestInfo {
    let mut info = RequestInfo {
        path: path.to_owned(),
        verb: method.as_str().to_ascii_lowercase(),
        ..Default::default()
    };
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let Some((&prefix, rest)) = segments.split_first() else {
        return info;
    };
    if prefix != "api" && prefix != "apis" {
        return info;
    }
    let mut rest: Vec<&str> = rest.to_vec();
    // /api/v1 needs at least a version; /apis/group/version needs both.
    let min = if prefix == "api" { 1 } else { 2 };
    if rest.len() < min {
        return info;
    }
    info.prefix = prefix.to_owned();
    if prefix == "apis" {
        info.api_group = rest.remove(0).to_owned();
    }
    info.api_version = rest.remove(0).to_owned();
    info.parts = rest.iter().map(|s| s.to_string()).collect();
    if rest.is_empty() {
        // Discovery for one group version.
        return info;
    }
    info.is_resource_request = true;

    // The deprecated /watch/ path prefix.
    let mut watch_path = false;
    if rest[0] == "watch" {
        watch_path = true;
        rest.remove(0);
    }
    info.verb = match *method {
        http::Method::POST => "create",
        http::Method::GET | http::Method::HEAD => "get",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "",
    }
    .to_owned();
    if info.verb.is_empty() {
        info.verb = method.as_str().to_ascii_lowercase();
    }

    // namespaces/{ns}/{resource}/...: the namespace, then the resource in its own right, unless
    // what follows the name is a subresource of the namespace itself (status, finalize). As
    // upstream, a request for the namespace object carries its name as the namespace too.
    if rest[0] == "namespaces" && rest.len() > 1 {
        info.namespace = rest[1].to_owned();
        if rest.len() > 2 && rest[2] != "status" && rest[2] != "finalize" {
            rest.drain(..2);
        }
    }
    info.resource = rest[0].to_owned();
    info.name = rest.get(1).map(|s| s.to_string()).unwrap_or_default();
    info.subresource = rest.get(2).map(|s| s.to_string()).unwrap_or_default();

    // `watch` as upstream decodes it: the first value, a boolean query parameter.
    let watch_asked = form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .find(|(k, _)| k == "watch")
        .is_some_and(|(_, v)| query_bool(&v));
    if info.verb == "get" && info.name.is_empty() {
        info.verb = "list".into();
        // A list or watch of one object by `fieldSelector=metadata.name=N` is about N, so an
        // authorizer may allow it where it allows reading N (as upstream).
        let selector = query.unwrap_or("").split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k == "fieldSelector").then(|| {
                form_urlencoded::parse(format!("v={v}").as_bytes())
                    .next()
                    .map(|(_, v)| v.into_owned())
                    .unwrap_or_default()
            })
        });
        if let Some(sel) = selector {
            let mut terms = sel.split(',');
            if let (Some(term), None) = (terms.next(), terms.next()) {
                let name = term
                    .strip_prefix("metadata.name==")
                    .or(term.strip_prefix("metadata.name="));
                if let Some(name) =
                    name.filter(|n| !n.is_empty() && !n.contains('/') && *n != "." && *n != "..")
                {
                    info.name = name.to_owned();
                }
            }
        }
    }
    if watch_path || ((info.verb == "list" || info.verb == "get") && watch_asked) {
        info.verb = "watch".into();
    }
    if info.verb == "delete" && info.name.is_empty() {
        info.verb = "deletecollection".into();
    }
    info
}

/// A boolean query parameter's value as upstream decodes it (apimachinery's
/// `Convert_Slice_string_To_bool`): "0" and "false" in any case are false; anything else —
/// "true", "True" (what the Python client sends), "1", even "" — is true. An absent
/// parameter is false (the caller's business).
pub(crate) fn query_bool(value: &str) -> bool {
    !(value == "0" || value.eq_ignore_ascii_case("false"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn p(method: Method, path: &str, query: Option<&str>) -> RequestInfo {
        parse_request(&method, path, query)
    }

    #[test]
    fn namespaced_resources() {
        let i = p(Method::GET, "/api/v1/namespaces/default/pods/nginx", None);
        assert!(i.is_resource_request);
        assert_eq!(
            (i.verb.as_str(), i.api_group.as_str(), i.api_version.as_str()),
            ("get", "", "v1")
        );
        assert_eq!(
            (i.namespace.as_str(), i.resource.as_str(), i.name.as_str()),
            ("default", "pods", "nginx")
        );
        let i = p(Method::GET, "/apis/apps/v1/namespaces/default/deployments", None);
        assert_eq!(
            (i.verb.as_str(), i.api_group.as_str(), i.resource.as_str()),
            ("list", "apps", "deployments")
        );
        let i = p(
            Method::PUT,
            "/apis/apps/v1/namespaces/ns/deployments/web/scale",
            None,
        );
        assert_eq!(
            (i.verb.as_str(), i.name.as_str(), i.subresource.as_str()),
            ("update", "web", "scale")
        );
        let i = p(
            Method::POST,
            "/api/v1/namespaces/default/pods/nginx/binding",
            None,
        );
        assert_eq!((i.verb.as_str(), i.subresource.as_str()), ("create", "binding"));
    }

    #[test]
    fn cluster_scoped_and_namespaces() {
        let i = p(Method::GET, "/api/v1/nodes", None);
        assert_eq!(
            (i.verb.as_str(), i.resource.as_str(), i.namespace.as_str()),
            ("list", "nodes", "")
        );
        let i = p(Method::GET, "/api/v1/namespaces", None);
        assert_eq!((i.verb.as_str(), i.resource.as_str()), ("list", "namespaces"));
        let i = p(Method::DELETE, "/api/v1/namespaces/kube-system", None);
        assert_eq!(
            (i.verb.as_str(), i.resource.as_str(), i.name.as_str()),
            ("delete", "namespaces", "kube-system")
        );
        assert_eq!(i.namespace, "kube-system");
        let i = p(Method::PUT, "/api/v1/namespaces/dev/finalize", None);
        assert_eq!(
            (
                i.verb.as_str(),
                i.resource.as_str(),
                i.name.as_str(),
                i.subresource.as_str()
            ),
            ("update", "namespaces", "dev", "finalize")
        );
    }

    #[test]
    fn watches_and_collections() {
        let i = p(
            Method::GET,
            "/api/v1/namespaces/default/pods",
            Some("watch=true&resourceVersion=5"),
        );
        assert_eq!(i.verb, "watch");
        let i = p(Method::GET, "/api/v1/watch/namespaces/default/pods", None);
        assert_eq!((i.verb.as_str(), i.resource.as_str()), ("watch", "pods"));
        let i = p(Method::DELETE, "/api/v1/namespaces/default/configmaps", None);
        assert_eq!(i.verb, "deletecollection");
        let i = p(
            Method::GET,
            "/api/v1/namespaces/default/secrets",
            Some("fieldSelector=metadata.name%3Dtls&watch=true"),
        );
        assert_eq!((i.verb.as_str(), i.name.as_str()), ("watch", "tls"));
        let i = p(
            Method::GET,
            "/api/v1/namespaces/default/secrets",
            Some("fieldSelector=metadata.name%3Dtls%2Ctype%3Dx"),
        );
        assert_eq!((i.verb.as_str(), i.name.as_str()), ("list", ""));
    }

    #[test]
    fn watch_is_a_boolean_as_upstream_decodes_it() {
        let verb = |q: &str| p(Method::GET, "/api/v1/namespaces/default/pods", Some(q)).verb;
        // The Python client sends `watch=True`; Go's clients `watch=true`; `1` and even an
        // empty value are true too.
        for q in [
            "watch=True",
            "watch=true",
            "watch=TRUE",
            "watch=1",
            "watch=",
            "watch=yes",
        ] {
            assert_eq!(verb(q), "watch", "{q}");
        }
        for q in ["watch=false", "watch=False", "watch=0", "limit=5"] {
            assert_eq!(verb(q), "list", "{q}");
        }
        // The first of repeated values counts.
        assert_eq!(verb("watch=0&watch=1"), "list");
        let q = crate::registry::Query::parse(Some(
            "allowWatchBookmarks=True&sendInitialEvents=0&dryRun=All&force=true&force=false",
        ));
        assert!(q.flag("allowWatchBookmarks"));
        assert!(!q.flag("sendInitialEvents"));
        assert!(!q.flag("timestamps"));
        assert!(q.flag("force"));
    }

    #[test]
    fn non_resource_and_discovery() {
        let i = p(Method::GET, "/healthz", None);
        assert!(!i.is_resource_request);
        assert_eq!(i.verb, "get");
        let i = p(Method::GET, "/apis/apps/v1", None);
        assert!(!i.is_resource_request);
        assert_eq!((i.api_group.as_str(), i.api_version.as_str()), ("apps", "v1"));
        assert!(!p(Method::GET, "/api", None).is_resource_request);
        assert!(!p(Method::GET, "/apis", None).is_resource_request);
    }
}
