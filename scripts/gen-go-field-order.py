#!/usr/bin/env python3
"""Writes crates/kubectl/src/printers/go_order_table.rs: the JSON field order of the Go types
kubectl prints as typed objects (a generator's object, `config view`, `version`), read from
the Go sources of k8s.io/api, k8s.io/apimachinery and k8s.io/client-go at v0.33.0.

Go's encoding/json writes a struct's fields in declaration order (embedded `,inline` structs
in place) and a map's keys sorted; `r8s kubectl -o json` needs the first to print such objects
as kubectl does. Only types reachable from ROOTS are kept.

Usage: scripts/gen-go-field-order.py API_REPO APIMACHINERY_REPO CLIENT_GO_REPO && cargo fmt
(git repositories; the v0.33.0 tag is read with `git show`, nothing is checked out; run from
the workspace root, and `cargo fmt` lays the table out as the committed file is).
"""
import re
import subprocess
import sys

TAG = "v0.33.0"
API, MACHINERY, CLIENT_GO = sys.argv[1:4]

# package id -> (repository, directory)
PACKAGES = {
    "core/v1": (API, "core/v1"),
    "apps/v1": (API, "apps/v1"),
    "batch/v1": (API, "batch/v1"),
    "rbac/v1": (API, "rbac/v1"),
    "scheduling/v1": (API, "scheduling/v1"),
    "policy/v1": (API, "policy/v1"),
    "networking/v1": (API, "networking/v1"),
    "autoscaling/v1": (API, "autoscaling/v1"),
    "autoscaling/v2": (API, "autoscaling/v2"),
    "authentication/v1": (API, "authentication/v1"),
    "meta/v1": (MACHINERY, "pkg/apis/meta/v1"),
    "version": (MACHINERY, "pkg/version"),
    "clientcmd/v1": (CLIENT_GO, "tools/clientcmd/api/v1"),
}
# import path -> package id
IMPORTS = {
    "k8s.io/api/" + k: k for k in PACKAGES if PACKAGES[k][0] == API
}
IMPORTS.update({
    "k8s.io/apimachinery/pkg/apis/meta/v1": "meta/v1",
    "k8s.io/apimachinery/pkg/version": "version",
})

# (apiVersion, kind, type); kind "" for a root looked up by name only.
ROOTS = [
    ("apps/v1", "Deployment", "apps/v1.Deployment"),
    ("batch/v1", "Job", "batch/v1.Job"),
    ("batch/v1", "CronJob", "batch/v1.CronJob"),
    ("v1", "Pod", "core/v1.Pod"),
    ("v1", "Service", "core/v1.Service"),
    ("v1", "ConfigMap", "core/v1.ConfigMap"),
    ("v1", "Secret", "core/v1.Secret"),
    ("v1", "Namespace", "core/v1.Namespace"),
    ("v1", "ServiceAccount", "core/v1.ServiceAccount"),
    ("v1", "ResourceQuota", "core/v1.ResourceQuota"),
    ("rbac.authorization.k8s.io/v1", "Role", "rbac/v1.Role"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", "rbac/v1.ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", "rbac/v1.RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "rbac/v1.ClusterRoleBinding"),
    ("scheduling.k8s.io/v1", "PriorityClass", "scheduling/v1.PriorityClass"),
    ("policy/v1", "PodDisruptionBudget", "policy/v1.PodDisruptionBudget"),
    ("networking.k8s.io/v1", "Ingress", "networking/v1.Ingress"),
    ("autoscaling/v1", "HorizontalPodAutoscaler", "autoscaling/v1.HorizontalPodAutoscaler"),
    ("autoscaling/v2", "HorizontalPodAutoscaler", "autoscaling/v2.HorizontalPodAutoscaler"),
    ("authentication.k8s.io/v1", "SelfSubjectReview", "authentication/v1.SelfSubjectReview"),
    ("v1", "Config", "clientcmd/v1.Config"),
    ("", "", "version.Info"),
]


def files(repo, directory):
    out = subprocess.run(["git", "-C", repo, "ls-tree", "--name-only", TAG, directory + "/"],
                         check=True, capture_output=True, text=True).stdout.split()
    for path in out:
        name = path.rsplit("/", 1)[-1]
        if name.endswith(".go") and not name.endswith("_test.go") and "generated" not in name:
            yield subprocess.run(["git", "-C", repo, "show", f"{TAG}:{path}"],
                                 check=True, capture_output=True, text=True).stdout


FIELD = re.compile(r"^\s*(\w+)\s+([^\s`]+)\s+`([^`]*)`")
EMBED = re.compile(r"^\s*([\w.]+)\s+`([^`]*)`")
TAGJSON = re.compile(r'json:"([^"]*)"')

structs = {}  # type id -> [(json name, go type expr, pkg, aliases, inline)]


def parse(pkg, src):
    aliases = {}
    for m in re.finditer(r'^\s*(\w+\s+)?"([^"]+)"\s*$', src, re.M):
        path = m.group(2)
        alias = (m.group(1) or path.rsplit("/", 1)[-1]).strip()
        if path in IMPORTS:
            aliases[alias] = IMPORTS[path]
    for m in re.finditer(r"^type (\w+) struct \{\n(.*?)^\}", src, re.M | re.S):
        name, body = m.group(1), m.group(2)
        fields = []
        for line in body.splitlines():
            f = FIELD.match(line)
            e = EMBED.match(line) if not f else None
            if f:
                tag = TAGJSON.search(f.group(3))
                if not tag:
                    continue
                jname = tag.group(1).split(",")[0]
                if jname == "-":
                    continue
                inline = ",inline" in tag.group(1)
                fields.append((jname or f.group(1), f.group(2), inline))
            elif e:
                # An embedded struct: in place (`,inline`) or under its tag's name.
                tag = TAGJSON.search(e.group(2))
                if tag and ",inline" in tag.group(1):
                    fields.append(("", e.group(1), True))
                elif tag and tag.group(1).split(",")[0] not in ("", "-"):
                    fields.append((tag.group(1).split(",")[0], e.group(1), False))
        structs[f"{pkg}.{name}"] = (fields, pkg, aliases)


for pkg, (repo, directory) in PACKAGES.items():
    for src in files(repo, directory):
        parse(pkg, src)


def resolve(expr, pkg, aliases):
    """(kind, type id) of a Go type expression: kind is '' (struct or scalar), '[]' or 'map'."""
    kind = ""
    while True:
        if expr.startswith("*"):
            expr = expr[1:]
        elif expr.startswith("[]") and expr != "[]byte":
            kind = kind or "[]"
            expr = expr[2:]
        elif expr.startswith("map["):
            kind = kind or "map"
            expr = expr[expr.index("]") + 1:]
        else:
            break
    if "." in expr:
        alias, name = expr.split(".", 1)
        target = aliases.get(alias)
        tid = f"{target}.{name}" if target else ""
    else:
        tid = f"{pkg}.{expr}"
    return kind, (tid if tid in structs else "")


table = {}


def visit(tid):
    if tid in table or tid not in structs:
        return
    table[tid] = None
    out = []

    def expand(t):
        fields, pkg, aliases = structs[t]
        for jname, expr, inline in fields:
            kind, target = resolve(expr, pkg, aliases)
            if inline and not jname and target:
                expand(target)
                continue
            out.append((jname, kind, target))
            if target:
                visit(target)

    expand(tid)
    table[tid] = out


for _, _, root in ROOTS:
    visit(root)

missing = [r for _, _, r in ROOTS if r not in table]
if missing:
    sys.exit(f"root types not found: {missing}")


def rs(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


ids = sorted(table)
index = {t: i for i, t in enumerate(ids)}
lines = [
    "// Generated by scripts/gen-go-field-order.py from k8s.io/api, k8s.io/apimachinery and",
    f"// k8s.io/client-go {TAG}. Do not edit.",
    "",
    "use super::go_order::{Field, Shape};",
    "",
    "/// Go types: their name and their JSON fields in declaration order.",
    "pub(super) static TYPES: &[(&str, &[Field])] = &[",
]
for t in ids:
    fs = []
    for jname, kind, target in table[t]:
        shape = {"": "Shape::One", "[]": "Shape::List", "map": "Shape::Map"}[kind]
        ty = index[target] if target else "NONE"
        fs.append(f"({rs(jname)}, {shape}, {ty})")
    lines.append(f"    ({rs(t)}, &[{', '.join(fs)}]),")
lines.append("];")
lines.append("")
lines.append("/// A type index meaning \"not a struct\" (a scalar, or a struct printed as a scalar).")
lines.append("pub(super) const NONE: usize = usize::MAX;")
lines.append("")
lines.append("/// The root types: (apiVersion, kind, index into TYPES).")
lines.append("pub(super) static ROOTS: &[(&str, &str, usize)] = &[")
for api_version, kind, t in ROOTS:
    lines.append(f"    ({rs(api_version)}, {rs(kind)}, {index[t]}),")
lines.append("];")
open("crates/kubectl/src/printers/go_order_table.rs", "w").write("\n".join(lines) + "\n")
print(f"{len(ids)} types", file=sys.stderr)
