"""The official Python client (PyPI `kubernetes`) against r8s, as its users call it: lists,
watches, writes, errors, exec over WebSocket (with and without stdin), port-forward over
WebSocket, logs. Every check asserts; the first failure ends the run with its traceback.
Usage: python python_client.py KUBECONFIG"""

import sys
import time

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from kubernetes.stream import portforward, stream

config.load_kube_config(sys.argv[1])
v1 = client.CoreV1Api()


def check(name, ok, got):
    if not ok:
        raise AssertionError(f"{name}: got {got!r}")
    print("ok", name)


names = sorted(p.metadata.name for p in v1.list_namespaced_pod("default").items)
check("list", names == ["sh", "web"], names)

# watch=True on the wire: a stream of events, not a list.
events = []
for ev in watch.Watch().stream(v1.list_namespaced_pod, "default", timeout_seconds=2):
    events.append((ev["type"], ev["object"].metadata.name))
check("watch", sorted(events) == [("ADDED", "sh"), ("ADDED", "web")], events)

out = stream(v1.connect_get_namespaced_pod_exec, "sh", "default",
             command=["sh", "-c", "echo out; echo err >&2"],
             stderr=True, stdin=False, stdout=True, tty=False)
# stdout and stderr are separate streams: their relative order is the runtime's race, as
# upstream's (the runtime copies each from its own pipe).
check("exec", sorted(out.splitlines()) == ["err", "out"], out)

r = stream(v1.connect_get_namespaced_pod_exec, "sh", "default", command=["cat"],
           stderr=True, stdin=True, stdout=True, tty=False, _preload_content=False)
r.write_stdin("hello\n")
got = ""
deadline = time.time() + 10
while time.time() < deadline and "hello" not in got:
    r.update(timeout=1)
    got += r.read_stdout() or ""
r.close()
check("exec with stdin", got == "hello\n", got)

# v5's close signal ends the command's input: `wc` counts what came and exits.
r = stream(v1.connect_get_namespaced_pod_exec, "sh", "default", command=["wc", "-c"],
           stderr=True, stdin=True, stdout=True, tty=False, _preload_content=False)
check("exec negotiates v5", r.subprotocol == "v5.channel.k8s.io", r.subprotocol)
r.write_stdin("four")
r.close_channel(0)
got = ""
deadline = time.time() + 10
while time.time() < deadline and r.is_open():
    r.update(timeout=1)
    got += r.read_stdout() or ""
check("exec stdin closed", got.strip() == "4" and r.returncode == 0, (got, r.returncode))
r.close()

pf = portforward(v1.connect_get_namespaced_pod_portforward, "web", "default", ports="80")
s = pf.socket(80)
s.setblocking(True)
s.sendall(b"GET / HTTP/1.0\r\nHost: web\r\n\r\n")
data = b""
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
s.close()
check("port-forward", data.startswith(b"HTTP/1.1 200 OK") and b"nginx" in data, data[:200])
check("port-forward error channel", pf.error(80) is None, pf.error(80))

log = v1.read_namespaced_pod_log("web", "default")
check("logs", isinstance(log, str) and len(log) > 0, log[:200])

# Following the log: a stream that starts with what is there and stays open.
followed = v1.read_namespaced_pod_log("web", "default", follow=True, _preload_content=False)
first = next(followed.stream(1024))
followed.release_conn()
check("logs follow", len(first) > 0 and first.decode(errors="replace") in log, first[:200])

pod = v1.patch_namespaced_pod("sh", "default", {"metadata": {"labels": {"checked": "yes"}}})
check("patch", pod.metadata.labels.get("checked") == "yes", pod.metadata.labels)

svc = v1.create_namespaced_service("default", {
    "metadata": {"name": "py"}, "spec": {"ports": [{"port": 80}], "selector": {"run": "web"}}})
check("service status", svc.status is not None and svc.status.load_balancer is not None, svc.status)
v1.delete_namespaced_service("py", "default")

# Paging: limit and _continue until the list is whole, as chunked list callers do.
for i in range(5):
    v1.create_namespaced_config_map("default", {"metadata": {"name": f"page-{i}", "labels": {"paged": "yes"}}})
seen, token, pages = [], None, 0
while True:
    page = v1.list_namespaced_config_map("default", label_selector="paged=yes", limit=2, _continue=token)
    seen += [c.metadata.name for c in page.items]
    pages += 1
    token = page.metadata._continue
    if not token:
        break
check("paging", seen == [f"page-{i}" for i in range(5)] and pages == 3, (seen, pages))

# Server-side apply: created, then changed, with the field manager recorded.
cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"a": "1"}}
v1.patch_namespaced_config_map("applied", "default", cm, field_manager="py-apply",
                               _content_type="application/apply-patch+yaml")
cm["data"] = {"a": "2", "b": "3"}
got = v1.patch_namespaced_config_map("applied", "default", cm, field_manager="py-apply",
                                     _content_type="application/apply-patch+yaml")
managers = [m.manager for m in got.metadata.managed_fields]
check("server-side apply", got.data == {"a": "2", "b": "3"} and "py-apply" in managers, (got.data, managers))

# A watch from a list's resourceVersion (an informer's list-then-watch) sees what follows.
rv = v1.list_namespaced_config_map("default").metadata.resource_version
v1.delete_namespaced_config_map("page-0", "default")
v1.patch_namespaced_config_map("page-1", "default", {"data": {"x": "y"}})
seen = []
for ev in watch.Watch().stream(v1.list_namespaced_config_map, "default", resource_version=rv,
                               timeout_seconds=2):
    seen.append((ev["type"], ev["object"].metadata.name))
check("watch from a resourceVersion", seen == [("DELETED", "page-0"), ("MODIFIED", "page-1")], seen)

# A watch from a compacted resourceVersion: 410 Gone, which informers answer by relisting.
try:
    for ev in watch.Watch().stream(v1.list_namespaced_config_map, "default", resource_version="1",
                                   timeout_seconds=2):
        check("410 for a compacted resourceVersion", False, ev)
    check("410 for a compacted resourceVersion", False, "the watch ended without an error")
except ApiException as e:
    check("410 for a compacted resourceVersion", e.status == 410, (e.status, e.reason))

try:
    v1.read_namespaced_pod("nope", "default")
    check("404", False, "no error")
except ApiException as e:
    check("404", e.status == 404 and '"reason":"NotFound"' in e.body, (e.status, e.body))

print("all ok")
