//! A kube-rs controller of a custom resource from `#[derive(CustomResource)]` (kube-rs's own
//! example shape) against r8s (issue 38): its CRD installed from the derived definition,
//! Established, and its objects reconciled through the status subresource by a
//! `kube::runtime::Controller`.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;
use kube::{Api, Client, CustomResource, CustomResourceExt, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use support::Server;

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(group = "clux.dev", version = "v1", kind = "Foo", namespaced)]
#[kube(status = "FooStatus")]
#[kube(printcolumn = r#"{"name":"Replicas", "jsonPath": ".spec.replicas", "type": "integer"}"#)]
pub struct FooSpec {
    name: String,
    info: String,
    replicas: i32,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
pub struct FooStatus {
    doubled: i32,
    greeting: String,
}

async fn client(server: &Server) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(&server.kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

#[derive(Debug)]
struct Failed(kube::Error);

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::error::Error for Failed {}

/// The controller's reconcile: the status says what the spec asked for.
async fn reconcile(obj: Arc<Foo>, api: Arc<Api<Foo>>) -> Result<Action, Failed> {
    let status = serde_json::json!({"status": {
        "doubled": obj.spec.replicas * 2,
        "greeting": format!("hello {}", obj.spec.name),
    }});
    api.patch_status(
        &obj.name_any(),
        &PatchParams::apply("foo-controller"),
        &Patch::Merge(&status),
    )
    .await
    .map_err(Failed)?;
    Ok(Action::await_change())
}

#[test]
fn a_kube_rs_controller_reconciles_a_derived_custom_resource() {
    let server = Server::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = client(&server).await;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        crds.create(&PostParams::default(), &Foo::crd()).await.unwrap();
        let established = await_condition(crds, "foos.clux.dev", conditions::is_crd_established());
        tokio::time::timeout(Duration::from_secs(10), established)
            .await
            .expect("the CRD is established")
            .unwrap();

        let foos: Api<Foo> = Api::namespaced(client.clone(), "default");
        let ctx = Arc::new(foos.clone());
        let controller = tokio::spawn(
            Controller::new(foos.clone(), watcher::Config::default())
                .run(reconcile, |_, _, _| Action::requeue(Duration::from_secs(1)), ctx)
                .for_each(|_| async {}),
        );
        for (name, replicas) in [("one", 1), ("three", 3)] {
            let foo = Foo::new(
                name,
                FooSpec {
                    name: name.into(),
                    info: "test".into(),
                    replicas,
                },
            );
            foos.create(&PostParams::default(), &foo).await.unwrap();
        }
        // Both reconciled; then a change of spec is reconciled again.
        let done = |foos: Api<Foo>, name: &'static str, want: i32| async move {
            for _ in 0..100 {
                let f = foos.get(name).await.unwrap();
                if f.status.as_ref().is_some_and(|s| s.doubled == want) {
                    return f;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("{name} was never reconciled to {want}");
        };
        let one = done(foos.clone(), "one", 2).await;
        assert_eq!(one.status.unwrap().greeting, "hello one");
        done(foos.clone(), "three", 6).await;
        foos.patch(
            "three",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
        let three = done(foos.clone(), "three", 10).await;
        assert_eq!(three.metadata.generation, Some(2));
        controller.abort();
    });
}
