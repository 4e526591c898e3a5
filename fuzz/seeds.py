#!/usr/bin/env python3
"""Write the seed inputs of every fuzz target into fuzz/corpus/<target>/seed-*.

The fuzzers grow the corpora from these; `scripts/fuzz.sh` minimises what they find back into
the same directories. Run again after the resource catalogue changes order (the object and
patch targets pick a resource by its index in `r8s_api::catalogue()`).
"""
import json
import os
import re
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CATALOGUE = os.path.join(HERE, "..", "crates", "api", "src", "catalogue.rs")


def catalogue():
    """(group, version, kind, plural) of every built-in resource, in the catalogue's order."""
    text = open(CATALOGUE).read()
    body = text[text.index("static CATALOGUE"):]
    return re.findall(r'res!\("([^"]*)", "([^"]*)", "([^"]*)", "([^"]*)"', body)


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


# A few objects of the kinds users write most, as kubectl sends them.
POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "web", "labels": {"app": "web"}, "annotations": {"a": "b"}},
       "spec": {"containers": [{"name": "web", "image": "nginx:1.25",
                                "ports": [{"containerPort": 80, "name": "http"}],
                                "env": [{"name": "A", "value": "1"},
                                        {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                              "limits": {"cpu": "1", "memory": "128Mi"}},
                                "readinessProbe": {"httpGet": {"path": "/", "port": 80}},
                                "securityContext": {"runAsUser": 1000, "capabilities": {"drop": ["ALL"]}},
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                "volumes": [{"name": "data", "emptyDir": {"sizeLimit": "1Gi"}}],
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}}}
TEMPLATE = {"metadata": {"labels": {"app": "web"}}, "spec": POD["spec"]}
SELECTOR = {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]}
OBJECTS = {
    "pods": POD,
    "deployments": {"metadata": {"name": "web"}, "spec": {"replicas": 3, "selector": SELECTOR, "template": TEMPLATE,
                    "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}}}},
    "replicasets": {"metadata": {"name": "web"}, "spec": {"replicas": 2, "selector": SELECTOR, "template": TEMPLATE}},
    "statefulsets": {"metadata": {"name": "db"}, "spec": {"replicas": 2, "serviceName": "db", "selector": SELECTOR, "template": TEMPLATE,
                     "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}},
    "daemonsets": {"metadata": {"name": "agent"}, "spec": {"selector": SELECTOR, "template": TEMPLATE}},
    "jobs": {"metadata": {"name": "pi"}, "spec": {"completions": 5, "parallelism": 2, "completionMode": "Indexed", "backoffLimit": 3,
             "podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
             "template": {"spec": dict(POD["spec"], restartPolicy="Never")}}},
    "cronjobs": {"metadata": {"name": "tick"}, "spec": {"schedule": "*/5 * * * *", "timeZone": "Europe/Paris",
                 "jobTemplate": {"spec": {"template": {"spec": dict(POD["spec"], restartPolicy="OnFailure")}}}}},
    "services": {"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"}, "type": "NodePort", "ipFamilyPolicy": "PreferDualStack",
                 "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]}},
    "configmaps": {"metadata": {"name": "cfg"}, "data": {"a": "1"}, "binaryData": {"b": "AAE="}},
    "secrets": {"metadata": {"name": "s"}, "type": "kubernetes.io/tls", "stringData": {"tls.crt": "x", "tls.key": "y"}},
    "namespaces": {"metadata": {"name": "team", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
    "nodes": {"metadata": {"name": "n1"}, "spec": {"podCIDR": "10.42.0.0/24", "taints": [{"key": "k", "effect": "NoSchedule"}]},
              "status": {"capacity": {"cpu": "2", "memory": "4Gi", "pods": "110"}}},
    "persistentvolumeclaims": {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}},
    "persistentvolumes": {"metadata": {"name": "pv1"}, "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/x"}}},
    "resourcequotas": {"metadata": {"name": "q"}, "spec": {"hard": {"pods": "10", "requests.cpu": "2"}, "scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}},
    "limitranges": {"metadata": {"name": "l"}, "spec": {"limits": [{"type": "Container", "default": {"cpu": "500m"}, "max": {"memory": "1Gi"}}]}},
    "ingresses": {"metadata": {"name": "i"}, "spec": {"rules": [{"host": "a.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                  "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}},
    "networkpolicies": {"metadata": {"name": "np"}, "spec": {"podSelector": SELECTOR, "policyTypes": ["Ingress", "Egress"],
                        "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}], "ports": [{"port": 80, "endPort": 90}]}]}},
    "roles": {"metadata": {"name": "r"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]},
    "clusterroles": {"metadata": {"name": "cr"}, "aggregationRule": {"clusterRoleSelectors": [SELECTOR]}, "rules": []},
    "rolebindings": {"metadata": {"name": "rb"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
                     "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "fuzz"}]},
    "horizontalpodautoscalers": {"metadata": {"name": "h"}, "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                                 "minReplicas": 1, "maxReplicas": 5, "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]}},
    "poddisruptionbudgets": {"metadata": {"name": "p"}, "spec": {"minAvailable": "50%", "selector": SELECTOR}},
    "priorityclasses": {"metadata": {"name": "high"}, "value": 1000, "preemptionPolicy": "Never"},
    "storageclasses": {"metadata": {"name": "local"}, "provisioner": "r8s.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"},
    "customresourcedefinitions": {"metadata": {"name": "things.example.com"}, "spec": {"group": "example.com", "scope": "Namespaced",
        "names": {"plural": "things", "kind": "Thing"}, "versions": [{"name": "v1", "served": True, "storage": True,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [{"rule": "self.a < 5"}], "properties": {"a": {"type": "integer", "maximum": 9}}}}}}}]}},
    "validatingadmissionpolicies": {"metadata": {"name": "vap"}, "spec": {"failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]}]},
        "validations": [{"expression": "object.spec.replicas <= 5", "messageExpression": "'too many: ' + string(object.spec.replicas)"}]}},
    "endpointslices": {"metadata": {"name": "e"}, "addressType": "IPv4", "endpoints": [{"addresses": ["10.42.0.5"], "conditions": {"ready": True}}],
                       "ports": [{"name": "http", "port": 80}]},
    "leases": {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": "2026-11-29T00:00:00.000000Z"}},
    "flowschemas": {"metadata": {"name": "f"}, "spec": {"priorityLevelConfiguration": {"name": "global-default"}, "matchingPrecedence": 500,
                    "rules": [{"subjects": [{"kind": "Group", "group": {"name": "system:authenticated"}}],
                               "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"]}]}]}},
    "certificatesigningrequests": {"metadata": {"name": "c"}, "spec": {"request": "LS0tLQ==", "signerName": "kubernetes.io/kube-apiserver-client",
                                   "usages": ["client auth"], "expirationSeconds": 3600}},
}
GENERIC = {"metadata": {"name": "x", "labels": {"a": "b"}, "finalizers": ["example.com/f"], "ownerReferences": [
    {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u", "controller": True}]}, "spec": {}}


def varint(v):
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(tag, payload):
    """A length-delimited protobuf field."""
    if isinstance(payload, str):
        payload = payload.encode()
    return varint(tag << 3 | 2) + varint(len(payload)) + payload


def number(tag, v):
    return varint(tag << 3) + varint(v)


def envelope(api_version, kind, raw):
    """Kubernetes' protobuf envelope: magic, then runtime.Unknown{typeMeta, raw}."""
    type_meta = field(1, api_version) + field(2, kind)
    return b"k8s\x00" + field(1, type_meta) + field(2, raw) + field(4, "application/vnd.kubernetes.protobuf")


def meta(name, labels=None):
    m = field(1, name)
    for k, v in (labels or {}).items():
        m += field(11, field(1, k) + field(2, v))
    return m


def container(name, image):
    return field(1, name) + field(2, image) + field(6, number(3, 80) + field(4, "TCP"))


PROTOBUF = {
    "configmaps": envelope("v1", "ConfigMap", field(1, meta("cfg")) + field(2, field(1, "a") + field(2, "1"))),
    "pods": envelope("v1", "Pod", field(1, meta("web", {"app": "web"})) + field(2, field(2, container("web", "nginx")))),
    "deployments": envelope("apps/v1", "Deployment", field(1, meta("web")) + field(2,
        number(1, 3) + field(2, field(1, field(1, "app") + field(2, "web")))
        + field(3, field(1, meta("", {"app": "web"})) + field(2, field(2, container("web", "nginx")))))),
}


def main():
    cat = catalogue()
    index = {plural: i for i, (group, _v, _k, plural) in reversed(list(enumerate(cat)))}
    for i, (group, version, kind, plural) in enumerate(cat):
        if i > 255:
            break
        obj = dict(OBJECTS.get(plural, GENERIC))
        obj["apiVersion"] = f"{group}/{version}" if group else version
        obj["kind"] = kind
        body = json.dumps(obj).encode()
        write("object", f"{plural}.{group or 'core'}", bytes([i, 0]) + body)
        # Patches: a JSON patch, a merge patch, a strategic merge patch, an apply.
        live = json.dumps(obj).encode()
        patches = [
            json.dumps([{"op": "replace", "path": "/metadata/labels", "value": {"c": "d"}},
                        {"op": "add", "path": "/metadata/annotations", "value": {"x": "y"}},
                        {"op": "test", "path": "/kind", "value": kind}]),
            json.dumps({"metadata": {"labels": {"a": None, "e": "f"}}, "spec": None}),
            json.dumps({"metadata": {"finalizers": ["example.com/g"], "$deleteFromPrimitiveList/finalizers": ["example.com/f"]},
                        "spec": {"$patch": "replace"}}),
            "apiVersion: %s\nkind: %s\nmetadata:\n  name: x\n  labels:\n    a: c\n" % (obj["apiVersion"], kind),
        ]
        if plural in ("pods", "deployments", "services", "customresourcedefinitions"):
            for how, p in enumerate(patches):
                write("patch", f"{plural}-{how}", bytes([i, how]) + live + b"\x00" + p.encode())
        if plural in PROTOBUF:
            write("object", f"{plural}.protobuf", bytes([i, 1]) + PROTOBUF[plural])
            write("protobuf", plural, PROTOBUF[plural])
    pods = index["pods"]
    containers = json.dumps({"spec": {"containers": [{"name": "web", "image": "nginx:1.26"}, {"name": "side", "image": "busybox"}],
                                      "$setElementOrder/containers": [{"name": "side"}, {"name": "web"}]}})
    write("patch", "pods-containers", bytes([pods, 2]) + json.dumps(POD).encode() + b"\x00" + containers.encode())
    write("patch", "pods-apply-force", bytes([pods, 7]) + json.dumps(POD).encode() + b"\x00" + json.dumps(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}, "spec": {"containers": [{"name": "web", "image": "x"}]}}).encode())

    # Query strings of lists and watches.
    for n, q in enumerate([
        "labelSelector=app%3Dweb%2Ctier+notin+%28db%2Ccache%29%2C%21legacy&fieldSelector=metadata.name%3Dx%2Cstatus.phase%21%3DFailed&limit=5",
        "resourceVersion=0&resourceVersionMatch=NotOlderThan&timeoutSeconds=30&allowWatchBookmarks=true&watch=1",
        "continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIsInN0YXJ0IjoiL3JlZ2lzdHJ5L3BvZHMvZGVmYXVsdC9hIn0&limit=1",
        "fieldSelector=spec.nodeName%3Dn1&labelSelector=environment+in+%28production%2Cqa%29&sendInitialEvents=true",
        "dryRun=All&fieldManager=kubectl&fieldValidation=Strict&force=true&gracePeriodSeconds=0&propagationPolicy=Foreground",
    ]):
        write("query", f"{n}", bytes([pods]) + q.encode())

    # Selectors, quantities, schedules.
    for n, s in enumerate(["app=web,tier!=db", "env in (prod, qa),!legacy,release", "a.b/c notin (x),k==v,x>4",
                           "metadata.name=x,spec.nodeName!=n1", '{"matchLabels":{"a":"b"},"matchExpressions":[{"key":"k","operator":"Exists"}]}']):
        write("selectors", f"{n}", s)
    for n, q in enumerate(["500m", "1.5Gi", "1e3", "0.000000001", "12345678901234567890Ki", "-2.5E-3", "1Ei", "100k"]):
        write("quantity", f"{n}", q)
    for n, s in enumerate(["*/5 * * * *", "0 9-17/2 * JAN-MAR mon-fri", "CRON_TZ=Europe/Paris 30 2 29 2 *", "@every 1h30m",
                           "@hourly", "TZ=UTC 0 0 L * ?", "1h2m3.5s", "-1.5us", "300ms"]):
        write("schedules", f"{n}", s)

    # SPDY frames: SYN_REPLY, DATA, PING, RST_STREAM, GOAWAY.
    def control(kind, flags, payload):
        return struct.pack(">HHB", 0x8003, kind, flags) + len(payload).to_bytes(3, "big") + payload
    def data(stream, flags, payload):
        return struct.pack(">IB", stream, flags) + len(payload).to_bytes(3, "big") + payload
    write("spdy", "0", control(2, 0, struct.pack(">I", 1) + b"\x00" * 4) + data(1, 0, b"hello") + data(3, 1, b""))
    write("spdy", "1", control(6, 0, struct.pack(">I", 7)) + control(3, 0, struct.pack(">II", 5, 1)) + control(7, 0, struct.pack(">II", 0, 0)))

    # An exec session: the client's WebSocket frames (masked), 0xFF 0x00 0xFF, the runtime's
    # SPDY frames (stdin 1, stdout 3, stderr 5, error 7, resize 9).
    def ws(opcode, payload, mask=b"\x01\x02\x03\x04"):
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked
    client = ws(2, b"\x00hello") + ws(2, b"\x04{\"Width\":80,\"Height\":24}") + ws(2, b"\xff\x00") + ws(8, b"\x03\xe8")
    runtime = (control(2, 0, struct.pack(">I", 3) + b"\x00" * 4) + data(3, 0, b"hello") + data(5, 1, b"")
               + data(7, 1, b'{"status":"Success"}') + data(3, 1, b""))
    write("websocket", "0", client + b"\xff\x00\xff" + runtime)
    write("websocket", "1", ws(1, b"\x00text stdin") + b"\xff\x00\xff" + control(6, 0, struct.pack(">I", 2)) + control(7, 0, b"\x00" * 8))

    # Log records of the embedded store: a put and a deletion.
    def record(kind, create, version, prev, key, value):
        return bytes([kind]) + struct.pack("<qqqI", create, version, prev, len(key)) + key + value
    write("store_record", "put", record(1, 5, 2, 7, b"/registry/pods/default/a", b'{"kind":"Pod"}'))
    write("store_record", "delete", record(2, 5, 0, 9, b"/registry/pods/default/a", b""))

    # DNS queries (the first byte: odd is UDP), with and without EDNS.
    def query(qid, name, qtype, edns=False):
        q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 1 if edns else 0)
        for label in name.split("."):
            if label:
                q += bytes([len(label)]) + label.encode()
        q += b"\x00" + struct.pack(">HH", qtype, 1)
        if edns:
            q += b"\x00" + struct.pack(">HHIH", 41, 4096, 0, 0)
        return q
    for n, (name, qtype, edns) in enumerate([("web.default.svc.cluster.local", 1, False), ("web.default.svc.cluster.local", 28, True),
                                             ("_http._tcp.web.default.svc.cluster.local", 33, False), ("db-0.db.prod.svc.cluster.local", 1, True),
                                             ("ext.default.svc.cluster.local", 1, False), ("20.0.43.10.in-addr.arpa", 12, False),
                                             ("db.prod.svc.cluster.local", 255, True), ("example.org", 1, False)]):
        write("dns", f"{n}", bytes([n % 2]) + query(0x1234 + n, name, qtype, edns))

    # kubeconfigs.
    write("kubeconfig", "0", """apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=
    proxy-url: socks5://127.0.0.1:1080
contexts:
- name: x
  context: {cluster: c, user: u, namespace: team}
current-context: x
users:
- name: u
  user:
    token: abc
    as: jane
    as-groups: [dev]
""")
    write("kubeconfig", "1", """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://localhost:8080", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {username: a, password: b}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
---
current-context: y
""")

    # Requests to the API server: method (GET POST PUT PATCH DELETE), path index (see
    # api_request.rs), media type (json protobuf yaml json-patch merge-patch smp apply), the query
    # line, the body.
    def request(method, path, media, q, body):
        if isinstance(body, dict) or isinstance(body, list):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        return bytes([method, path, media]) + q.encode() + b"\n" + body
    reqs = [
        request(1, 0, 0, "fieldValidation=Strict", POD),
        request(1, 0, 1, "", PROTOBUF["pods"]),
        request(0, 0, 0, "labelSelector=app%3Dweb&limit=1", b""),
        request(3, 1, 5, "fieldManager=fuzz", {"metadata": {"labels": {"b": "c"}}}),
        request(3, 1, 3, "", [{"op": "add", "path": "/metadata/annotations/x", "value": "y"}]),
        request(3, 1, 6, "fieldManager=fuzz&force=true", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers:\n  - name: c\n    image: nginx\n"),
        request(1, 31, 0, "", OBJECTS["deployments"]),
        request(2, 33, 0, "", {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "x", "namespace": "fuzz"}, "spec": {"replicas": 5}}),
        request(1, 77, 0, "", {"apiVersion": "fuzz.example.com/v1", "kind": "Widget", "metadata": {"name": "x"}, "spec": {"replicas": 3, "size": "big", "ports": [{"port": 80}]}}),
        request(3, 78, 4, "", {"spec": {"replicas": 20}}),
        request(4, 0, 0, "gracePeriodSeconds=0&labelSelector=app%3Dweb", {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}),
        request(1, 65, 0, "", {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {"user": "a", "resourceAttributes": {"verb": "get", "resource": "pods"}}}),
        request(1, 71, 0, "", dict(OBJECTS["validatingadmissionpolicies"], metadata={"name": "x"})),
        request(0, 255, 0, "/api/v1/namespaces/fuzz/pods?continue=abc&limit=2", b""),
        request(0, 255, 0, "/openapi/v3/apis/apps/v1", b""),
        request(0, 255, 0, "/apis/apps/v1/namespaces/fuzz/deployments/x?resourceVersion=0", b""),
    ]
    for n, r in enumerate(reqs):
        write("api_request", f"{n}", r)

    # cri_results: a pod shape, then the runtime's answers as length-delimited CRI messages.
    def delimited(msg):
        return varint(len(msg)) + msg

    def sandbox(sid, ready=True, attempt=0):
        meta = field(1, "p") + field(2, "u") + field(3, "default") + number(4, attempt)
        return field(1, sid) + field(2, meta) + number(3, 0 if ready else 1) + number(4, 1_700_000_000_000_000_000)

    def sandbox_status(sid, ips):
        network = field(1, ips[0]) + b"".join(field(2, field(1, ip)) for ip in ips[1:])
        return field(1, sid) + number(3, 0) + field(5, network)

    def ctr(cid, sid, name, attempt, state):
        return field(1, cid) + field(2, sid) + field(3, field(1, name) + number(2, attempt)) + number(6, state)

    def ctr_status(cid, name, attempt, state, exit_code=0, reason="", message=""):
        out = field(1, cid) + field(2, field(1, name) + number(2, attempt)) + number(3, state)
        out += number(5, 1_700_000_001_000_000_000) + number(6, 1_700_000_002_000_000_000 if state == 2 else 0)
        out += number(7, exit_code) + field(9, "sha256:0") + field(10, reason) + field(11, message)
        return out

    def answers(shape, sandboxes, status, containers, statuses):
        return (bytes([shape]) + delimited(b"".join(field(1, sb) for sb in sandboxes)) + delimited(status)
                + delimited(b"".join(field(1, c) for c in containers)) + b"".join(delimited(s) for s in statuses))

    write("cri_results", "running", answers(
        0, [sandbox("s1")], sandbox_status("s1", ["10.42.0.5", "fd00::5"]),
        [ctr("c1", "s1", "app", 0, 1)], [ctr_status("c1", "app", 0, 1)]))
    write("cri_results", "restarted", answers(
        4 | 16, [sandbox("s1")], sandbox_status("s1", ["10.42.0.6"]),
        [ctr("c1", "s1", "app", 0, 2), ctr("c2", "s1", "app", 1, 1), ctr("c3", "s1", "second", 0, 2)],
        [ctr_status("c1", "app", 0, 2, 1, "Error", "boom"), ctr_status("c2", "app", 1, 1),
         ctr_status("c3", "second", 0, 2, 137, "OOMKilled")]))
    write("cri_results", "initialising", answers(
        2 | 32 | 64, [sandbox("s1")], sandbox_status("s1", ["fd00::7", "10.42.0.7"]),
        [ctr("i1", "s1", "init", 0, 2), ctr("i2", "s1", "sidecar", 0, 1), ctr("c1", "s1", "app", 0, 0)],
        [ctr_status("i1", "init", 0, 2), ctr_status("i2", "sidecar", 0, 1), ctr_status("c1", "app", 0, 0)]))
    write("cri_results", "sandbox-changed", answers(
        1 | 8, [sandbox("s1", ready=False), sandbox("s2", attempt=1)], sandbox_status("s2", ["not-an-ip"]),
        [ctr("c1", "s1", "app", 0, 2)], [ctr_status("c1", "app", 0, 2, 0, "Completed")]))


if __name__ == "__main__":
    main()
