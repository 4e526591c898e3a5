//! Impersonation: a user the authorizers allow to `impersonate` may act as another user, with
//! the `Impersonate-User`, `-Uid`, `-Group` and `-Extra-<key>` headers (`kubectl --as`,
//! `--as-group`, `--as-uid`), as upstream's impersonation filter does.

use http::HeaderMap;

use super::UserInfo;
use crate::authz::{forbidden_message, AuthorizerChain};
use crate::request_info::RequestInfo;
use crate::status::ApiError;

const USER: &str = "impersonate-user";
const UID: &str = "impersonate-uid";
const GROUP: &str = "impersonate-group";
const EXTRA_PREFIX: &str = "impersonate-extra-";

/// Whether the request asks to impersonate anyone.
pub fn requested(headers: &HeaderMap) -> bool {
    headers.keys().any(|k| k.as_str().starts_with("impersonate-"))
}

/// The user `requester` acts as, once every part of the impersonation is authorized.
pub async fn impersonate(
    authorizers: &AuthorizerChain,
    requester: &UserInfo,
    headers: &HeaderMap,
) -> Result<UserInfo, ApiError> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_owned)
            .collect()
    };
    let name = values(USER).into_iter().next().unwrap_or_default();
    let uid = values(UID).into_iter().next().unwrap_or_default();
    let groups = values(GROUP);
    let mut extra = std::collections::BTreeMap::<String, Vec<String>>::new();
    for key in headers.keys() {
        if let Some(k) = key.as_str().strip_prefix(EXTRA_PREFIX) {
            let k = percent_decode(k).to_lowercase();
            extra.entry(k).or_default().extend(values(key.as_str()));
        }
    }
    if name.is_empty() {
        return Err(ApiError::bad_request(
            "requested impersonation of groups, a uid or extra fields without impersonating a user",
        ));
    }

    // Every part is checked: the user (or service account), each group, the uid, each extra.
    let mut checks = Vec::new();
    let sa = name
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'));
    checks.push(match sa {
        Some((ns, sa)) => attrs("", "serviceaccounts", "", ns, sa),
        None => attrs("", "users", "", "", &name),
    });
    for g in &groups {
        checks.push(attrs("", "groups", "", "", g));
    }
    if !uid.is_empty() {
        checks.push(attrs("authentication.k8s.io", "uids", "", "", &uid));
    }
    for (k, vs) in &extra {
        for v in vs {
            checks.push(attrs("authentication.k8s.io", "userextras", k, "", v));
        }
    }
    for check in &checks {
        if let Err(reason) = authorizers.authorize(requester, check).await {
            return Err(ApiError::forbidden(forbidden_message(
                requester,
                check,
                reason.as_deref(),
            )));
        }
    }

    let mut user = UserInfo {
        name: name.clone(),
        uid,
        groups,
        extra,
    };
    if let Some((ns, _)) = sa {
        if user.groups.is_empty() {
            user.groups = vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
            ];
        }
    }
    let implied = if name == "system:anonymous" {
        "system:unauthenticated"
    } else {
        "system:authenticated"
    };
    if !user.groups.iter().any(|g| g == implied) {
        user.groups.push(implied.into());
    }
    Ok(user)
}

fn attrs(group: &str, resource: &str, subresource: &str, namespace: &str, name: &str) -> RequestInfo {
    RequestInfo {
        is_resource_request: true,
        verb: "impersonate".into(),
        api_group: group.into(),
        namespace: namespace.into(),
        resource: resource.into(),
        subresource: subresource.into(),
        name: name.into(),
        ..Default::default()
    }
}

/// Extra keys travel percent-encoded in header names (`Impersonate-Extra-scopes%2Fx`).
fn percent_decode(s: &str) -> String {
    form_urlencoded::parse(format!("k={}", s.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authz::PrivilegedGroups;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn masters_may_impersonate_others_get_upstreams_403() {
        let mut chain = AuthorizerChain::default();
        chain.push(PrivilegedGroups::masters());
        let mut h = HeaderMap::new();
        h.insert("impersonate-user", "jane".parse().unwrap());
        h.append("impersonate-group", "devs".parse().unwrap());
        h.insert("impersonate-extra-scopes%2Fa", "x".parse().unwrap());
        assert!(requested(&h));
        let as_jane = impersonate(&chain, &user("admin", &["system:masters"]), &h)
            .await
            .unwrap();
        assert_eq!(as_jane.name, "jane");
        assert_eq!(
            as_jane.groups,
            vec!["devs".to_owned(), "system:authenticated".to_owned()]
        );
        assert_eq!(as_jane.extra["scopes/a"], vec!["x".to_owned()]);

        let err = impersonate(&chain, &user("bob", &["system:authenticated"]), &h)
            .await
            .unwrap_err();
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            "users \"jane\" is forbidden: User \"bob\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        );

        let mut sa = HeaderMap::new();
        sa.insert(
            "impersonate-user",
            "system:serviceaccount:dev:robot".parse().unwrap(),
        );
        let robot = impersonate(&chain, &user("admin", &["system:masters"]), &sa)
            .await
            .unwrap();
        assert_eq!(
            robot.groups,
            vec![
                "system:serviceaccounts",
                "system:serviceaccounts:dev",
                "system:authenticated"
            ]
        );
        let mut group_only = HeaderMap::new();
        group_only.insert("impersonate-group", "devs".parse().unwrap());
        assert_eq!(
            impersonate(&chain, &user("admin", &["system:masters"]), &group_only)
                .await
                .unwrap_err()
                .code,
            400
        );
    }
}
