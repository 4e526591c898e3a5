//! The API server's CRD controllers (upstream's naming, establishing and finalizer
//! controllers of apiextensions-apiserver), run in the server itself: they watch the
//! CustomResourceDefinitions in the datastore and
//! - grant each CRD its names when no other CRD of its group holds them (`NamesAccepted`,
//!   `status.acceptedNames`) and mark it `Established`;
//! - serve the custom resources of established CRDs (the server's [`Served`] set), so a new
//!   kind is reachable as soon as its CRD's status says so;
//! - delete a deleted CRD's instances, then release it (the cleanup finalizer).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use r8s_store::{RangeRequest, StoreError, WatchItem};
use serde_json::{json, Value};

use super::{condition_true, definitions, set_condition, CLEANUP_FINALIZER};
use crate::registry::catalogue::{builtin, version_order, Resource};
use crate::registry::{decode, encode, key, meta, prefix, system};
use crate::Shared;

fn crd_def() -> &'static Resource {
    builtin("apiextensions.k8s.io", "v1", "customresourcedefinitions").expect("CRDs are served")
}

/// Run the controllers until the server stops.
pub(crate) async fn run(shared: Arc<Shared>) {
    let finalizing: Arc<Mutex<HashSet<String>>> = Arc::default();
    loop {
        let def = crd_def();
        let listed = match shared
            .store
            .range(RangeRequest {
                prefix: prefix(def, ""),
                ..Default::default()
            })
            .await
        {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "CRD controller: listing CRDs failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let mut crds: Vec<Value> = listed.kvs.iter().filter_map(|kv| decode(def, kv).ok()).collect();
        reconcile(&shared, &mut crds, &finalizing).await;
        let Ok(mut watch) = shared.store.watch(&prefix(def, ""), listed.revision + 1).await else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        loop {
            match watch.next_item().await {
                Some(Ok(WatchItem::Events(_))) => {
                    // CRDs are few: read them all again and reconcile the whole set.
                    let Ok(list) = system::list(shared.store.as_ref(), def, "").await else {
                        break;
                    };
                    let mut crds = list;
                    reconcile(&shared, &mut crds, &finalizing).await;
                }
                Some(Ok(WatchItem::Progress(_))) => {}
                _ => break,
            }
        }
    }
}

/// Bring every CRD's status up to date and serve what is established.
async fn reconcile(shared: &Arc<Shared>, crds: &mut [Value], finalizing: &Arc<Mutex<HashSet<String>>>) {
    let def = crd_def();
    crds.sort_by(|a, b| {
        let ts = |o: &Value| {
            o["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        };
        ts(a).cmp(&ts(b)).then_with(|| meta::name(a).cmp(meta::name(b)))
    });
    for i in 0..crds.len() {
        let (before, rest) = crds.split_at_mut(i);
        let (crd, after) = rest.split_first_mut().expect("in range");
        let others: Vec<&Value> = before.iter().chain(after.iter()).collect();
        let mut next = crd.clone();
        name_and_establish(&mut next, &others);
        if next["status"] != crd["status"] {
            match system::update_status(shared.store.as_ref(), def, &next, crd).await {
                Ok(true) => {
                    // Read back at its new version by the next round; serve it as written now.
                    *crd = next;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(crd = meta::name(crd), error = %e.message, "CRD status write failed")
                }
            }
        }
    }
    let mut served: Vec<&'static Resource> = Vec::new();
    let mut terminating = Vec::new();
    for crd in crds.iter() {
        if !condition_true(crd, "Established") {
            continue;
        }
        let mut defs = definitions(crd, &shared.store);
        defs.sort_by(|a, b| version_order(a.version, b.version));
        if !crd["metadata"]["deletionTimestamp"].is_null() {
            terminating.extend(defs.iter().copied());
        }
        served.extend(defs);
    }
    let gvs: Vec<(&'static str, &'static str)> = {
        let mut gvs: Vec<(&'static str, &'static str)> =
            served.iter().map(|d: &&Resource| (d.group, d.version)).collect();
        gvs.dedup();
        gvs
    };
    for gone in shared.served.set_custom(served, terminating) {
        shared.watch_cache.forget(gone);
    }
    register_apiservices(shared, &gvs).await;
    for crd in crds.iter() {
        let deleting = !crd["metadata"]["deletionTimestamp"].is_null();
        if deleting && meta::finalizers(crd).iter().any(|f| f == CLEANUP_FINALIZER) {
            let uid = crd["metadata"]["uid"].as_str().unwrap_or("").to_owned();
            if finalizing
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(uid.clone())
            {
                let (shared, finalizing, crd) = (shared.clone(), finalizing.clone(), crd.clone());
                tokio::spawn(async move {
                    finalize(&shared, &crd).await;
                    finalizing
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&uid);
                });
            }
        }
    }
}

/// Upstream's crdregistration controller: a local APIService for every group version of the
/// served custom resources, and none for a group version no CRD serves any more.
async fn register_apiservices(shared: &Arc<Shared>, gvs: &[(&'static str, &'static str)]) {
    use crate::registry::apiservices::{local, name_of, AUTOMANAGED};
    let def =
        crate::registry::catalogue::builtin("apiregistration.k8s.io", "v1", "apiservices").expect("served");
    let Ok(existing) = system::list(shared.store.as_ref(), def, "").await else {
        return;
    };
    for (g, v) in gvs {
        let name = name_of(g, v);
        if !existing.iter().any(|s| meta::name(s) == name) {
            let obj = local(g, v, 0, "true");
            let _ = shared.store.create(&key(def, "", &name), encode(def, &obj)).await;
        }
    }
    for s in &existing {
        let ours = s["metadata"]["labels"][AUTOMANAGED] == "true";
        let (g, v) = (
            s["spec"]["group"].as_str().unwrap_or(""),
            s["spec"]["version"].as_str().unwrap_or(""),
        );
        if ours && !gvs.iter().any(|(sg, sv)| *sg == g && *sv == v) {
            let rv = meta::resource_version(s);
            let _ = shared.store.delete(&key(def, "", meta::name(s)), rv).await;
        }
    }
}

/// Upstream's naming controller and establishing controller for one CRD: the names it asks
/// for are granted unless another CRD of its group has them; a CRD whose names were accepted
/// is established.
pub(crate) fn name_and_establish(crd: &mut Value, others: &[&Value]) {
    if !crd["metadata"]["deletionTimestamp"].is_null() {
        return;
    }
    let group = crd["spec"]["group"].as_str().unwrap_or("").to_owned();
    let names = crd["spec"]["names"].clone();
    let mut taken_plural = HashSet::new();
    let mut taken_singular = HashSet::new();
    let mut taken_short = HashSet::new();
    let mut taken_kind = HashSet::new();
    let mut taken_list_kind = HashSet::new();
    for o in others.iter().filter(|o| o["spec"]["group"] == group.as_str()) {
        let a = &o["status"]["acceptedNames"];
        let s = |k: &str| a[k].as_str().unwrap_or("").to_owned();
        taken_plural.insert(s("plural"));
        taken_singular.insert(s("singular"));
        taken_kind.insert(s("kind"));
        taken_list_kind.insert(s("listKind"));
        for n in a["shortNames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            taken_short.insert(n.to_owned());
        }
    }
    let s = |k: &str| names[k].as_str().unwrap_or("").to_owned();
    let mut conflict: Option<(&str, String)> = None;
    let accepted = &crd["status"]["acceptedNames"];
    // Names this CRD was already granted stay its own.
    let had = |k: &str| accepted[k].as_str().is_some_and(|v| !v.is_empty() && v == s(k));
    if !had("plural") && taken_plural.contains(&s("plural")) {
        conflict = Some(("PluralConflict", format!("\"{}\" is already in use", s("plural"))));
    } else if !had("singular") && !s("singular").is_empty() && taken_singular.contains(&s("singular")) {
        conflict = Some((
            "SingularConflict",
            format!("\"{}\" is already in use", s("singular")),
        ));
    } else if let Some(short) = names["shortNames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find(|n| taken_short.contains(*n))
    {
        conflict = Some(("ShortNamesConflict", format!("\"{short}\" is already in use")));
    } else if !had("kind") && taken_kind.contains(&s("kind")) {
        conflict = Some(("KindConflict", format!("\"{}\" is already in use", s("kind"))));
    } else if !had("listKind") && taken_list_kind.contains(&s("listKind")) {
        conflict = Some((
            "ListKindConflict",
            format!("\"{}\" is already in use", s("listKind")),
        ));
    }
    match conflict {
        None => {
            let mut accepted = names.clone();
            if let Some(o) = accepted.as_object_mut() {
                o.retain(|_, v| !v.is_null());
            }
            crd["status"]["acceptedNames"] = accepted;
            set_condition(crd, "NamesAccepted", "True", "NoConflicts", "no conflicts found");
            if !condition_true(crd, "Established") {
                set_condition(
                    crd,
                    "Established",
                    "True",
                    "InitialNamesAccepted",
                    "the initial names have been accepted",
                );
            }
        }
        Some((reason, message)) => {
            set_condition(crd, "NamesAccepted", "False", reason, &message);
            if !condition_true(crd, "Established") {
                set_condition(
                    crd,
                    "Established",
                    "False",
                    "NotAccepted",
                    "not all names are accepted",
                );
            }
        }
    }
}

/// Delete every instance of a deleted CRD (each as a delete would: objects with finalizers
/// are marked and waited for), then remove the cleanup finalizer, which lets the CRD go.
async fn finalize(shared: &Arc<Shared>, crd: &Value) {
    let name = meta::name(crd).to_owned();
    let crd_def = crd_def();
    let Some(instances) = definitions(crd, &shared.store).into_iter().next() else {
        release(shared, &name).await;
        return;
    };
    let mut marked = false;
    for _ in 0..600 {
        let Ok(list) = shared
            .store
            .range(RangeRequest {
                prefix: prefix(instances, ""),
                ..Default::default()
            })
            .await
        else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        if list.kvs.is_empty() {
            release(shared, &name).await;
            return;
        }
        if !marked {
            if let Ok(current) = crate::registry::system::get(shared.store.as_ref(), crd_def, "", &name).await
            {
                let mut next = current.clone();
                set_condition(
                    &mut next,
                    "Terminating",
                    "True",
                    "InstanceDeletionInProgress",
                    "CustomResource deletion is in progress",
                );
                let _ = system::update_status(shared.store.as_ref(), crd_def, &next, &current).await;
            }
            marked = true;
        }
        for kv in &list.kvs {
            let Ok(obj) = decode(instances, kv) else { continue };
            if meta::finalizers(&obj).is_empty() {
                let _ = shared.store.delete(&kv.key, Some(kv.mod_revision)).await;
            } else if obj["metadata"]["deletionTimestamp"].is_null() {
                let mut obj = obj;
                let m = meta::meta_mut(&mut obj);
                m.insert("deletionTimestamp".into(), json!(meta::now_rfc3339()));
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
                m.remove("resourceVersion");
                let _ = shared
                    .store
                    .update(&kv.key, encode(instances, &obj), kv.mod_revision)
                    .await;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tracing::warn!(crd = %name, "CRD finalizer: instances remain after two minutes; will retry");
}

/// Remove the cleanup finalizer of CRD `name` (deleting it when nothing else holds it).
async fn release(shared: &Arc<Shared>, name: &str) {
    let def = crd_def();
    for _ in 0..10 {
        let Ok(current) = system::get(shared.store.as_ref(), def, "", name).await else {
            return;
        };
        let rv = meta::resource_version(&current).unwrap_or(0);
        let rest: Vec<String> = meta::finalizers(&current)
            .into_iter()
            .filter(|f| f != CLEANUP_FINALIZER)
            .collect();
        let result = if rest.is_empty() {
            shared
                .store
                .delete(&key(def, "", name), Some(rv))
                .await
                .map(|_| ())
        } else {
            let mut next = current.clone();
            meta::meta_mut(&mut next).insert("finalizers".into(), json!(rest));
            meta::meta_mut(&mut next).remove("resourceVersion");
            shared
                .store
                .update(&key(def, "", name), encode(def, &next), rv)
                .await
                .map(|_| ())
        };
        match result {
            Ok(()) | Err(StoreError::NotFound { .. }) => return,
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(plural: &str, kind: &str, accepted: bool) -> Value {
        let mut c = json!({"metadata": {"name": format!("{plural}.example.com")},
            "spec": {"group": "example.com", "names": {"plural": plural, "singular": plural.trim_end_matches('s'),
                "kind": kind, "listKind": format!("{kind}List"), "shortNames": []}},
            "status": {}});
        if accepted {
            c["status"]["acceptedNames"] = c["spec"]["names"].clone();
        }
        c
    }

    #[test]
    fn names_are_granted_unless_another_crd_of_the_group_holds_them() {
        let mut fresh = crd("widgets", "Widget", false);
        name_and_establish(&mut fresh, &[]);
        assert!(condition_true(&fresh, "NamesAccepted"));
        assert!(condition_true(&fresh, "Established"));
        assert_eq!(fresh["status"]["acceptedNames"]["kind"], "Widget");

        let holder = crd("gadgets", "Widget", true);
        let mut clash = crd("widgets", "Widget", false);
        name_and_establish(&mut clash, &[&holder]);
        assert!(!condition_true(&clash, "NamesAccepted"));
        assert!(!condition_true(&clash, "Established"));
        let c = clash["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "NamesAccepted")
            .unwrap()
            .clone();
        assert_eq!(c["reason"], "KindConflict");
        assert_eq!(c["message"], "\"Widget\" is already in use");
        // Another group may use the same names.
        let mut elsewhere = holder.clone();
        elsewhere["spec"]["group"] = json!("other.io");
        let mut fine = crd("widgets", "Widget", false);
        name_and_establish(&mut fine, &[&elsewhere]);
        assert!(condition_true(&fine, "Established"));
    }
}
