//! The ClusterRole aggregation controller (upstream `clusterrole-aggregation-controller`): a
//! ClusterRole with an `aggregationRule` holds the rules of every ClusterRole its selectors
//! match, so `admin`, `edit` and `view` grow with the `aggregate-to-*` roles beside them.

use std::sync::Arc;

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::SyncResult;
use r8s_client::informer::{lookup, Change, Factory, Informer};
use r8s_client::queue::{run_controller, WorkQueue};

pub struct AggregationController {
    client: Client,
    informer: Arc<Informer<ClusterRole>>,
    store: Store<ClusterRole>,
    queue: Arc<WorkQueue>,
}

impl AggregationController {
    pub fn new(factory: &Factory) -> Arc<Self> {
        let informer = factory.get::<ClusterRole>();
        let this = Arc::new(Self {
            client: factory.client(),
            store: informer.store(),
            informer,
            queue: WorkQueue::new("clusterrole-aggregation"),
        });
        // Any change may matter to any aggregating role: queue them all, as upstream does.
        let (q, store) = (this.queue.clone(), this.store.clone());
        this.informer.add_handler(move |c| {
            if let Change::Added(r) | Change::Updated(_, r) = &c {
                if r.aggregation_rule.is_some() {
                    q.add(r.name_any());
                }
            }
            for r in store.state() {
                if r.aggregation_rule.is_some() {
                    q.add(r.name_any());
                }
            }
        });
        this
    }

    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let this = self.clone();
        run_controller(
            self.queue.clone(),
            vec![self.informer.clone().synced()],
            1,
            stop,
            move |key| {
                let this = this.clone();
                async move { this.sync(&key).await }
            },
        )
        .await;
    }

    async fn sync(&self, name: &str) -> SyncResult {
        let Some(role) = lookup(&self.store, name) else {
            return Ok(None);
        };
        let Some(rule) = role.aggregation_rule.as_ref() else {
            return Ok(None);
        };
        let rules = aggregate(
            name,
            rule.cluster_role_selectors.as_deref().unwrap_or_default(),
            &self.store.state(),
        )?;
        if role.rules.as_deref().unwrap_or_default() == rules.as_slice() {
            return Ok(None);
        }
        let mut updated = (*role).clone();
        updated.rules = Some(rules);
        let api: Api<ClusterRole> = Api::all(self.client.clone());
        match api.replace(name, &crate::post_params(), &updated).await {
            Ok(_) => Ok(None),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

/// The rules of every ClusterRole (but `name` itself) that a selector matches, in the order of
/// the roles' names, each rule once.
fn aggregate(
    name: &str,
    selectors: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector],
    roles: &[Arc<ClusterRole>],
) -> Result<Vec<PolicyRule>, crate::Error> {
    let matchers = selectors
        .iter()
        .map(|s| crate::selector(Some(s)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut selected: Vec<&Arc<ClusterRole>> = roles
        .iter()
        .filter(|r| r.name_any() != name)
        .filter(|r| {
            matchers
                .iter()
                .any(|m| m.matches_labels(r.metadata.labels.as_ref()))
        })
        .collect();
    selected.sort_by_key(|r| r.name_any());
    let mut out: Vec<PolicyRule> = Vec::new();
    for r in selected {
        for rule in r.rules.iter().flatten() {
            if !out.contains(rule) {
                out.push(rule.clone());
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

    fn role(name: &str, label: Option<&str>, verbs: &[&str]) -> Arc<ClusterRole> {
        Arc::new(ClusterRole {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: label.map(|l| [(l.to_owned(), "true".to_owned())].into()),
                ..Default::default()
            },
            rules: Some(vec![PolicyRule {
                verbs: verbs.iter().map(|v| v.to_string()).collect(),
                api_groups: Some(vec!["".into()]),
                resources: Some(vec!["pods".into()]),
                ..Default::default()
            }]),
            ..Default::default()
        })
    }

    #[test]
    fn selected_roles_rules_in_name_order_each_once() {
        let sel = LabelSelector {
            match_labels: Some([("agg".to_owned(), "true".to_owned())].into()),
            ..Default::default()
        };
        let roles = vec![
            role("z-extra", Some("agg"), &["delete"]),
            role("a-base", Some("agg"), &["get"]),
            role("dup", Some("agg"), &["get"]),
            role("unrelated", None, &["create"]),
            role("view", Some("agg"), &["watch"]),
        ];
        let rules = aggregate("view", &[sel], &roles).unwrap();
        let verbs: Vec<&str> = rules.iter().map(|r| r.verbs[0].as_str()).collect();
        assert_eq!(verbs, vec!["get", "delete"]);
        assert!(aggregate("view", &[], &roles).unwrap().is_empty());
    }
}
