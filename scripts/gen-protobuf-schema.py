#!/usr/bin/env python3
"""Generate the protobuf field table the API server uses to read Kubernetes' protobuf encoding.

kubectl 1.32 and later send typed objects (`kubectl create deployment ...`) as protobuf. The
field numbers and types of every Kubernetes message are published in the `k8s-pb` crate (prost
structs generated from the upstream .proto files); the JSON name of every field is published in
the `k8s-openapi` crate (serde field names). This script reads both crates' sources from the
local cargo registry and writes one line per field:

    M <module path of the message>          e.g. M api.core.v1.Pod
    <tag> <json name> <kind>[ <message>]    kinds: s b i32 i64 f64 y m, ms my mm (maps of
                                            string to string/bytes/message); a trailing []
                                            marks repeated fields

Usage: scripts/gen-protobuf-schema.py > crates/apiserver/src/protobuf/schema.txt
(run `cargo fetch` first so both crates are in the registry).
"""
import glob
import os
import re
import sys

K8S_PB = "k8s-pb-0.9.0"
K8S_OPENAPI_GLOB = "k8s-openapi-0.29.*"
OPENAPI_VERSION = "v1_33"


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


def main():
    pb = registry_dir(K8S_PB)
    openapi = registry_dir(K8S_OPENAPI_GLOB)
    out = []
    for path in sorted(glob.glob(os.path.join(pb, "src", "**", "mod.rs"), recursive=True)):
        module = os.path.relpath(os.path.dirname(path), os.path.join(pb, "src")).replace(os.sep, ".")
        if module == ".":
            continue
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
                line = f"{tag} {json} {kind}{'[]' if repeated else ''}"
                if kind in ("m", "mm"):
                    line += " " + resolve(module, type_text)
                fields.append(line)
                i = j + 1
            out.append(f"M {module}.{struct}")
            out.extend(fields)
            i += 1
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
