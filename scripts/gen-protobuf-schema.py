#!/usr/bin/env python3
"""Generate the protobuf field table the API server uses to read Kubernetes' protobuf encoding.

kubectl 1.32 and later send typed objects (`kubectl create deployment ...`) as protobuf. The
field numbers and types of every Kubernetes message are published in the `k8s-pb` crate (prost
structs generated from the upstream .proto files); the JSON name of every field is published in
the `k8s-openapi` crate (serde field names). This script reads both crates' sources from the
local cargo registry and writes one line per field:

    M <module path of the message>          e.g. M api.core.v1.Pod
    <tag> <json name> <kind>[ <message>][ z][ i]
                                            kinds: s b i32 i64 f64 y m, ms my mm (maps of
                                            string to string/bytes/message); a trailing []
                                            marks repeated fields; z marks a scalar that is
                                            dropped when it is zero (false, 0, ""); i marks
                                            a message whose fields are inlined in its parent

Go's generated protobuf code writes every non-pointer scalar field, even when it is zero, while
the Go struct's JSON tag usually says `omitempty`, so upstream's JSON leaves such zeros out.
Pointer fields (`Replicas *int32`) are written only when set, and a zero there means something.
So a scalar gets `z` exactly when its Go field is not a pointer and its JSON tag has `omitempty`
(or `omitzero`). The Go JSON tags also give the JSON names k8s-openapi cannot (types it lacks,
names prost splits oddly: podCIDRs is pod_cid_rs) and mark the `json:",inline"` messages.
Those facts come from the Go types of k8s.io/api, k8s.io/apimachinery,
k8s.io/apiextensions-apiserver, k8s.io/kube-aggregator and k8s.io/metrics, recorded in
scripts/protobuf-go-fields.txt, one line per field of every message:

    M <module path of the message>
    <tag> <json name> <flags>               flags: p (Go pointer), o (omitempty or omitzero),
                                            i (json:",inline"), or - for none

Usage: scripts/gen-protobuf-schema.py > crates/apiserver/src/protobuf/schema.txt
(run `cargo fetch` first so both crates are in the registry).

To record the Go facts again (for a new Kubernetes version), check out the Go modules at the
release k8s-pb was generated from (e.g. `git archive v0.35.7 | tar -x -C DIR` in a clone of
github.com/kubernetes/api) and name each by the first segment of its module paths:

    scripts/gen-protobuf-schema.py --go api=DIR apimachinery=DIR apiextensions_apiserver=DIR \
        kube_aggregator=DIR metrics=DIR > scripts/protobuf-go-fields.txt

The committed file was recorded from api, apimachinery and apiextensions-apiserver v0.35.7 and
kube-aggregator and metrics v0.35.6 (Kubernetes 1.35: their messages and field numbers are
exactly those of k8s-pb 0.9.0). The script reports on stderr what it could not match.
"""
import glob
import os
import re
import sys

K8S_PB = "k8s-pb-0.9.0"
K8S_OPENAPI_GLOB = "k8s-openapi-0.29.*"
OPENAPI_VERSION = "v1_33"
GO_FIELDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "protobuf-go-fields.txt")
SCALARS = ("s", "b", "i32", "i64", "f64", "y")


def registry_dir(pattern):
    home = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))
    found = sorted(glob.glob(os.path.join(home, "registry", "src", "*", pattern)))
    if not found:
        sys.exit(f"{pattern} is not in the cargo registry: run `cargo fetch` in the workspace first")
    return found[-1]


def snake(name):
    out = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    out = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", out)
    return out.lower()


def camel(snake_name):
    parts = snake_name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def json_names(openapi_root, module, struct):
    """rust field name -> JSON name, from k8s-openapi's Deserialize impl of the same type."""
    path = os.path.join(openapi_root, "src", OPENAPI_VERSION, *module.split("."), snake(struct) + ".rs")
    names = {}
    if os.path.exists(path):
        with open(path) as f:
            for m in re.finditer(r'"([A-Za-z0-9_$-]+)" => Field::Key_([a-z0-9_]+),', f.read()):
                names[m.group(2).rstrip("_")] = m.group(1)
    return names


def resolve(module, type_text):
    """The module path of the message named in a prost field type."""
    inner = type_text
    if "BTreeMap<" in inner:  # a map: the value type is the second argument
        inner = inner.split("BTreeMap<", 1)[1].split(",", 1)[1]
    for wrapper in ("::core::option::Option<", "::prost::alloc::vec::Vec<", "::prost::alloc::boxed::Box<"):
        inner = inner.replace(wrapper, "")
    inner = inner.strip().rstrip(">,").strip()
    parts = module.split(".")
    segments = inner.split("::")
    while segments and segments[0] == "super":
        parts.pop()
        segments.pop(0)
    return ".".join(parts + segments)


def pb_modules(pb):
    """(module path, mod.rs path) of every k8s-pb module."""
    for path in sorted(glob.glob(os.path.join(pb, "src", "**", "mod.rs"), recursive=True)):
        module = os.path.relpath(os.path.dirname(path), os.path.join(pb, "src")).replace(os.sep, ".")
        if module != ".":
            yield module, path


def go_structs(package_dir):
    """struct name -> [(protobuf tag, json name, flags)] for the Go structs of one package."""
    structs = {}
    for path in sorted(glob.glob(os.path.join(package_dir, "*.go"))):
        base = os.path.basename(path)
        if base.endswith("_test.go") or base.startswith("zz_generated") or base.startswith("generated."):
            continue
        with open(path) as f:
            lines = f.read().split("\n")
        i = 0
        while i < len(lines):
            m = re.match(r"(?:type |\t)(\w+) struct ?\{", lines[i])  # \t: in a type ( ... ) group
            i += 1
            if not m:
                continue
            fields = []
            depth = lines[i - 1].count("{") - lines[i - 1].count("}")
            while i < len(lines) and depth > 0:
                line = lines[i].split("//", 1)[0]  # struct tags never hold //
                i += 1
                depth += line.count("{") - line.count("}")
                fm = re.match(r"\s*([^`]*?)\s*`([^`]*)`", line)
                if depth != 1 or not fm:
                    continue
                decl, tags = fm.group(1).split(), dict(re.findall(r'(\w+):"([^"]*)"', fm.group(2)))
                proto = tags.get("protobuf", "-").split(",")
                if len(proto) < 2:
                    continue
                go_name, go_type = (decl[0], " ".join(decl[1:])) if len(decl) > 1 else (decl[0], decl[0])
                json_opts = tags.get("json", "").split(",")
                json = json_opts[0] or go_name.lstrip("*").split(".")[-1]
                flags = "".join(flag for flag, on in (
                    ("p", go_type.startswith("*")),
                    ("o", "omitempty" in json_opts[1:] or "omitzero" in json_opts[1:]),
                    ("i", "inline" in json_opts[1:]),
                ) if on)
                fields.append((int(proto[1]), json, flags or "-"))
            structs[m.group(1).lower()] = fields  # prost spells HTTPGetAction HttpGetAction
    return structs


def record_go_fields(roots):
    """Write the Go facts of every k8s-pb message (see the docstring)."""
    roots = dict(arg.split("=", 1) for arg in roots)
    out = [f"# Go fields of the Kubernetes protobuf messages, from {os.path.basename(__file__)} --go"]
    for module, path in pb_modules(registry_dir(K8S_PB)):
        first, *rest = module.split(".")
        if first not in roots:
            sys.exit(f"no Go sources for {module}: pass {first}=DIR")
        structs = go_structs(os.path.join(roots[first], *rest))
        with open(path) as f:
            for struct in re.findall(r"^pub struct (\w+) \{", f.read(), re.M):
                if struct.lower() not in structs:
                    print(f"no Go struct for {module}.{struct}", file=sys.stderr)
                    continue
                out.append(f"M {module}.{struct}")
                out.extend(f"{tag} {json} {flags}" for tag, json, flags in structs[struct.lower()])
    sys.stdout.write("\n".join(out) + "\n")


def read_go_fields():
    """message -> {tag: (json name, flags)} from scripts/protobuf-go-fields.txt."""
    facts, current = {}, None
    with open(GO_FIELDS) as f:
        for line in f:
            parts = line.split()
            if not parts or parts[0] == "#":
                continue
            if parts[0] == "M":
                current = facts.setdefault(parts[1], {})
            else:
                current[int(parts[0])] = (parts[1], parts[2])
    return facts


def main():
    if sys.argv[1:2] == ["--go"]:
        return record_go_fields(sys.argv[2:])
    pb = registry_dir(K8S_PB)
    openapi = registry_dir(K8S_OPENAPI_GLOB)
    go = read_go_fields()
    out = []
    for module, path in pb_modules(pb):
        with open(path) as f:
            lines = f.read().split("\n")
        i = 0
        while i < len(lines):
            empty = re.match(r"pub struct (\w+) \{\}", lines[i])
            if empty:
                out.append(f"M {module}.{empty.group(1)}")
                i += 1
                continue
            m = re.match(r"pub struct (\w+) \{", lines[i])
            if not m:
                i += 1
                continue
            struct = m.group(1)
            names = json_names(openapi, module, struct)
            go_fields = go.get(f"{module}.{struct}")
            if go_fields is None:
                print(f"no Go facts for {module}.{struct}", file=sys.stderr)
            fields = []
            i += 1
            while i < len(lines) and lines[i] != "}":
                attr = re.match(r"\s*#\[prost\((.*)\)\]", lines[i])
                if not attr:
                    i += 1
                    continue
                spec = attr.group(1)
                # The field declaration may span lines until its closing comma.
                j = i + 1
                decl = ""
                while j < len(lines):
                    decl += lines[j].strip()
                    if decl.endswith(",") and decl.count("<") == decl.count(">"):
                        break
                    j += 1
                fm = re.match(r"pub (?:r#)?(\w+):\s*(.*),$", decl)
                if not fm:
                    sys.exit(f"{path}: cannot read field after {spec!r}: {decl!r}")
                rust, type_text = fm.group(1), fm.group(2)
                tag = re.search(r'tag = "(\d+)"', spec).group(1)
                json = names.get(rust.rstrip("_"), camel(rust))
                repeated = ", repeated" in spec
                if spec.startswith("btree_map"):
                    value = re.search(r'btree_map = "string, (\w+)"', spec).group(1)
                    kind = {"string": "ms", "bytes": "my", "message": "mm"}[value]
                else:
                    kind = {"string": "s", "bool": "b", "int32": "i32", "int64": "i64", "double": "f64",
                            "bytes": "y", "message": "m"}[spec.split(",")[0].split(" ")[0]]
                go_json, go_flags = (go_fields or {}).get(int(tag), (None, ""))
                if go_fields is not None and go_json is None:
                    print(f"no Go field for {module}.{struct} {tag} {json}", file=sys.stderr)
                elif go_json is not None and go_json != json and "i" not in go_flags:
                    if go_json[0].islower() or go_json[0] == "$":
                        # k8s-openapi lacks the type, or prost split the name (podCIDRs: pod_cid_rs).
                        json = go_json
                    else:  # the JSON tag is "-" or missing: the type has its own JSON form
                        print(f"{module}.{struct} {tag}: JSON name {json} here, {go_json} in Go", file=sys.stderr)
                line = f"{tag} {json} {kind}{'[]' if repeated else ''}"
                if kind in ("m", "mm"):
                    line += " " + resolve(module, type_text)
                if kind in SCALARS and not repeated and "o" in go_flags and "p" not in go_flags:
                    line += " z"
                if kind == "m" and "i" in go_flags:
                    line += " i"
                fields.append(line)
                i = j + 1
            out.append(f"M {module}.{struct}")
            out.extend(fields)
            i += 1
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
