//! ValidatingAdmissionPolicies (issue 38): CEL validations with parameters, variables and
//! messageExpression, bound with Deny or Warn, judged by the real kubectl.

use crate::support::Server;

const POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: replica-limit}
spec:
  failurePolicy: Fail
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [deployments]
  variables:
  - name: max
    expression: int(params.data.maxReplicas)
  validations:
  - expression: object.spec.replicas <= variables.max
    messageExpression: "'replicas must be at most ' + string(variables.max)"
  - expression: "!has(object.metadata.labels) || !('forbidden' in object.metadata.labels)"
    message: the forbidden label is not allowed
"#;

fn binding(name: &str, ns: &str, action: &str) -> String {
    format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {{name: {name}}}\nspec:\n  policyName: replica-limit\n  validationActions: [{action}]\n  paramRef: {{name: limits, namespace: default, parameterNotFoundAction: Deny}}\n  matchResources:\n    namespaceSelector:\n      matchLabels: {{kubernetes.io/metadata.name: {ns}}}\n"
    )
}

/// Policies are followed from the datastore: run `create` until it is refused (deleting with
/// `undo` what it made while the policy was not yet in force), and return kubectl's error.
fn first_refusal(server: &Server, k: &str, create: &[&str], undo: &[&str], what: &str) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let out = server.kubectl(k, create);
        if !out.status.success() {
            return String::from_utf8_lossy(&out.stderr).into_owned();
        }
        server.ok(k, undo);
        assert!(std::time::Instant::now() < deadline, "{what} never denied");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn a_validating_admission_policy_with_a_param_denies_and_warns() {
    let server = Server::start();
    let k = "1.33";
    server.ok(k, &["create", "namespace", "strict"]);
    server.ok(k, &["create", "namespace", "lenient"]);
    server.ok(
        k,
        &["create", "configmap", "limits", "--from-literal=maxReplicas=3"],
    );
    server.ok_stdin(k, &["apply", "-f", "-"], POLICY);
    server.ok_stdin(
        k,
        &["apply", "-f", "-"],
        &binding("deny-strict", "strict", "Deny"),
    );
    server.ok_stdin(
        k,
        &["apply", "-f", "-"],
        &binding("warn-lenient", "lenient", "Warn"),
    );
    let cols = server.ok(k, &["get", "validatingadmissionpolicies"]);
    assert!(
        cols.lines()
            .any(|l| l.starts_with("replica-limit ") && l.contains(" 2 ") && l.contains("v1/ConfigMap")),
        "{cols}"
    );

    // Type checking, as upstream's status controller reports it: nothing to say of this one,
    // an undefined field in another.
    let status = |name: &str| -> serde_json::Value {
        let out = server.ok(
            k,
            &[
                "get",
                "validatingadmissionpolicy",
                name,
                "-o",
                "jsonpath={.status}",
            ],
        );
        serde_json::from_str(&out).unwrap()
    };
    assert_eq!(
        status("replica-limit"),
        serde_json::json!({"observedGeneration": 1, "typeChecking": {}})
    );
    let typo = POLICY
        .replace("name: replica-limit", "name: typo")
        .replace("object.spec.replicas <=", "object.spec.replicaz <=");
    server.ok_stdin(k, &["create", "-f", "-"], &typo);
    let warning =
        "apps/v1, Kind=Deployment: compilation failed: ERROR: <input>:1:12: undefined field 'replicaz'\n \
                   | object.spec.replicaz <= variables.max\n | ...........^\n";
    assert_eq!(
        status("typo"),
        serde_json::json!({"observedGeneration": 1, "typeChecking": {"expressionWarnings": [
            {"fieldRef": "spec.validations[0].expression", "warning": warning}]}})
    );
    server.ok(k, &["delete", "validatingadmissionpolicy", "typo"]);

    let err = first_refusal(
        &server,
        k,
        &[
            "create",
            "deployment",
            "big",
            "-n",
            "strict",
            "--image=nginx",
            "--replicas=5",
        ],
        &["delete", "deployment", "big", "-n", "strict"],
        "the policy",
    );
    assert!(
        err.contains("ValidatingAdmissionPolicy 'replica-limit' with binding 'deny-strict' denied request: replicas must be at most 3"),
        "{err}"
    );
    server.ok(
        k,
        &[
            "create",
            "deployment",
            "small",
            "-n",
            "strict",
            "--image=nginx",
            "--replicas=2",
        ],
    );
    let err = server.fails(
        k,
        &["label", "deployment", "small", "-n", "strict", "forbidden=yes"],
    );
    assert!(err.contains("the forbidden label is not allowed"), "{err}");
    // Elsewhere the same policy only warns.
    let out = server.kubectl(
        k,
        &[
            "create",
            "deployment",
            "big",
            "-n",
            "lenient",
            "--image=nginx",
            "--replicas=5",
        ],
    );
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Validation failed for ValidatingAdmissionPolicy 'replica-limit' with binding 'warn-lenient': replicas must be at most 3"),
        "{stderr}"
    );
    // Namespaces no binding selects are not judged.
    server.ok(
        k,
        &["create", "deployment", "big", "--image=nginx", "--replicas=5"],
    );
    // Without its parameter the Deny binding refuses.
    server.ok(k, &["delete", "configmap", "limits"]);
    let err = first_refusal(
        &server,
        k,
        &[
            "create",
            "deployment",
            "other",
            "-n",
            "strict",
            "--image=nginx",
            "--replicas=1",
        ],
        &["delete", "deployment", "other", "-n", "strict"],
        "a missing param",
    );
    assert!(err.contains("no params found"), "{err}");
}

const GUARD: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: secrets-readers-only}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [configmaps]
  validations:
  - expression: >-
      authorizer.group('').resource('secrets').namespace(object.metadata.namespace)
      .check('get').allowed()
    messageExpression: "request.userInfo.username + ' may not read secrets here'"
  - expression: "!authorizer.requestResource.check('delete').allowed() || (has(object.data) && object.data.size() > 0)"
    message: those who may delete configmaps write none empty
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: secrets-readers-only}
spec:
  policyName: secrets-readers-only
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {kubernetes.io/metadata.name: guarded}
"#;

/// The `authorizer` variable asks the server's own authorizers (RBAC here) about the
/// requesting user, whose permissions change while the policy stands.
#[test]
fn a_policy_asks_the_authorizer_about_the_requesting_user() {
    let server = Server::start();
    let k = "1.33";
    server.ok(k, &["create", "namespace", "guarded"]);
    server.ok(
        k,
        &[
            "create",
            "role",
            "writer",
            "-n",
            "guarded",
            "--verb=create",
            "--resource=configmaps",
        ],
    );
    server.ok(
        k,
        &[
            "create",
            "rolebinding",
            "bob-writes",
            "-n",
            "guarded",
            "--role=writer",
            "--user=bob",
        ],
    );
    server.ok_stdin(k, &["apply", "-f", "-"], GUARD);
    let err = first_refusal(
        &server,
        k,
        &[
            "create",
            "configmap",
            "c1",
            "-n",
            "guarded",
            "--from-literal=a=b",
            "--as=bob",
        ],
        &["delete", "configmap", "c1", "-n", "guarded"],
        "the policy",
    );
    assert!(
        err.contains("ValidatingAdmissionPolicy 'secrets-readers-only' with binding 'secrets-readers-only' denied request: bob may not read secrets here"),
        "{err}"
    );
    // The cluster admin reads secrets, and may delete configmaps: an empty one is refused.
    server.ok(
        k,
        &["create", "configmap", "c0", "-n", "guarded", "--from-literal=a=b"],
    );
    let err = server.fails(k, &["create", "configmap", "empty", "-n", "guarded"]);
    assert!(
        err.contains("those who may delete configmaps write none empty"),
        "{err}"
    );
    // Once bob may read secrets, his configmap is let through (and, as he may not delete
    // configmaps, even an empty one).
    server.ok(
        k,
        &[
            "create",
            "role",
            "reader",
            "-n",
            "guarded",
            "--verb=get",
            "--resource=secrets",
        ],
    );
    server.ok(
        k,
        &[
            "create",
            "rolebinding",
            "bob-reads",
            "-n",
            "guarded",
            "--role=reader",
            "--user=bob",
        ],
    );
    server.ok(
        k,
        &[
            "create",
            "configmap",
            "c2",
            "-n",
            "guarded",
            "--from-literal=a=b",
            "--as=bob",
        ],
    );
    server.ok(k, &["create", "configmap", "c3", "-n", "guarded", "--as=bob"]);
}

const MUTATE: &str = r#"
apiVersion: admissionregistration.k8s.io/v1alpha1
kind: MutatingAdmissionPolicy
metadata: {name: stamp}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [deployments]
  variables:
  - name: team
    expression: "object.metadata.namespace + '-team'"
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >-
        Object{metadata: Object.metadata{labels: {"team": variables.team}},
          spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{
            containers: [Object.spec.template.spec.containers{name: "sidecar", image: "busybox"}]}}}}
  - patchType: JSONPatch
    jsonPatch:
      expression: >-
        [JSONPatch{op: "add", path: "/metadata/annotations",
          value: {"replicas-asked": string(object.spec.replicas), "labels-seen": string(size(object.metadata.labels))}}]
  reinvocationPolicy: Never
---
apiVersion: admissionregistration.k8s.io/v1alpha1
kind: MutatingAdmissionPolicyBinding
metadata: {name: stamp}
spec:
  policyName: stamp
  matchResources:
    namespaceSelector:
      matchLabels: {kubernetes.io/metadata.name: stamped}
"#;

/// MutatingAdmissionPolicies (alpha, behind their feature gate as upstream's): an apply
/// configuration merged into the object (a keyed list merged by its key) and a JSON patch
/// that sees what the mutation before it did.
#[test]
fn a_mutating_admission_policy_patches_what_its_binding_selects() {
    let server = Server::start_with(&["--feature-gates=MutatingAdmissionPolicy=true"]);
    let k = "1.33";
    server.ok(k, &["create", "namespace", "stamped"]);
    let err = String::from_utf8_lossy(&server.fails_stdin(
        k,
        &["create", "-f", "-"],
        &MUTATE.replace("reinvocationPolicy: Never", "reinvocationPolicy: Sometimes"),
    ))
    .into_owned();
    assert!(
        err.contains("spec.reinvocationPolicy: Unsupported value: \"Sometimes\""),
        "{err}"
    );
    server.ok_stdin(k, &["apply", "-f", "-"], MUTATE);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let deployment = loop {
        server.ok(
            k,
            &[
                "create",
                "deployment",
                "web",
                "-n",
                "stamped",
                "--image=nginx",
                "--replicas=2",
            ],
        );
        let out = server.ok(k, &["get", "deployment", "web", "-n", "stamped", "-o", "json"]);
        let d: serde_json::Value = serde_json::from_str(&out).unwrap();
        if d["metadata"]["labels"]["team"].is_string() {
            break d;
        }
        server.ok(k, &["delete", "deployment", "web", "-n", "stamped"]);
        assert!(
            std::time::Instant::now() < deadline,
            "the policy never mutated: {out}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(deployment["metadata"]["labels"]["team"], "stamped-team");
    // kubectl's own label is kept beside the policy's.
    assert_eq!(deployment["metadata"]["labels"]["app"], "web");
    let names: Vec<&str> = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["sidecar", "nginx"], "containers merged by name");
    assert_eq!(
        deployment["metadata"]["annotations"],
        serde_json::json!({"replicas-asked": "2", "labels-seen": "2"})
    );
    // Elsewhere nothing is mutated.
    server.ok(k, &["create", "deployment", "plain", "--image=nginx"]);
    let out = server.ok(
        k,
        &["get", "deployment", "plain", "-o", "jsonpath={.metadata.labels}"],
    );
    assert!(!out.contains("team"), "{out}");
}
