//! API priority and fairness's configuration (issue 38): FlowSchemas and
//! PriorityLevelConfigurations served with upstream's bootstrap objects, defaults, columns and
//! status subresource.

use crate::support::Server;

#[test]
fn flow_schemas_and_priority_levels_are_served_with_the_bootstrap_configuration() {
    let server = Server::start();
    let k = "1.33";
    let schemas = server.ok(k, &["get", "flowschemas"]);
    let header = schemas.lines().next().unwrap();
    assert!(
        header.contains("PRIORITYLEVEL") && header.contains("MATCHINGPRECEDENCE"),
        "{schemas}"
    );
    assert!(
        schemas
            .lines()
            .any(|l| l.starts_with("exempt ") && l.contains(" 1 ")),
        "{schemas}"
    );
    assert!(
        schemas
            .lines()
            .any(|l| l.starts_with("catch-all ") && l.contains("10000") && l.contains("ByUser")),
        "{schemas}"
    );
    let levels = server.ok(k, &["get", "prioritylevelconfigurations"]);
    assert!(
        levels
            .lines()
            .any(|l| l.starts_with("workload-low ") && l.contains("Limited") && l.contains("100")),
        "{levels}"
    );

    // A new priority level gets upstream's queuing defaults.
    server.ok_stdin(k, &["create", "-f", "-"], "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: PriorityLevelConfiguration\nmetadata: {name: batch}\nspec:\n  type: Limited\n  limited:\n    limitResponse: {type: Queue}\n");
    let q = server.ok(k, &["get", "prioritylevelconfiguration", "batch", "-o",
        "jsonpath={.spec.limited.nominalConcurrencyShares} {.spec.limited.limitResponse.queuing.queues} {.spec.limited.limitResponse.queuing.handSize} {.spec.limited.limitResponse.queuing.queueLengthLimit}"]);
    assert_eq!(q, "30 64 8 50");
    let fs = "apiVersion: flowcontrol.apiserver.k8s.io/v1\nkind: FlowSchema\nmetadata: {name: batch}\nspec:\n  priorityLevelConfiguration: {name: batch}\n  matchingPrecedence: 0\n  rules:\n  - subjects: [{kind: Group, group: {name: batch-users}}]\n    resourceRules: [{verbs: ['*'], apiGroups: ['*'], resources: ['*'], namespaces: ['*']}]\n";
    let err = String::from_utf8(server.fails_stdin(k, &["create", "-f", "-"], fs)).unwrap();
    assert!(
        err.contains("spec.matchingPrecedence: Invalid value: 0: must be between 1 and 10000 inclusively"),
        "{err}"
    );
    server.ok_stdin(
        k,
        &["create", "-f", "-"],
        &fs.replace("matchingPrecedence: 0", "matchingPrecedence: 500"),
    );
    server.ok(
        k,
        &[
            "patch",
            "flowschema",
            "batch",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"conditions":[{"type":"Dangling","status":"False","reason":"Found"}]}}"#,
        ],
    );
    let dangling = server.ok(
        k,
        &[
            "get",
            "flowschema",
            "batch",
            "-o",
            "jsonpath={.status.conditions[0].type} {.metadata.generation}",
        ],
    );
    assert_eq!(dangling, "Dangling 1");
}
