#!/usr/bin/env python3
"""Generate r8s's patch-strategy table from upstream Kubernetes' OpenAPI v2 document.

Strategic merge patch, server-side apply (field sets, managedFields) and the served OpenAPI
schemas all need to know, for a property of a Kubernetes type, which type its value (or its
list items, or its map values) has and how lists and maps of it merge. Upstream publishes this
in `api/openapi-spec/swagger.json`:

    x-kubernetes-patch-strategy    merge | replace | retainKeys | merge,retainKeys
    x-kubernetes-patch-merge-key   the field a merged list's items are matched by
    x-kubernetes-list-type         atomic | set | map
    x-kubernetes-list-map-keys     the key fields of a `map` list
    x-kubernetes-map-type          atomic | granular (on a property, or on a whole definition)
    x-kubernetes-group-version-kind  which definition is the root of which kind

This script reads that document and writes one Rust file,
crates/api/src/patch_strategy/generated.rs, with:

    FIELDS     one entry per (definition, property) that refers to another definition or
               carries one of the extensions above, sorted for binary search
    MAP_TYPES  definitions marked with x-kubernetes-map-type
    ROOTS      (group, version, kind) -> definition, for definitions with one group-version-kind
    KEY_DEFAULTS  defaults of list-map key fields that are optional (upstream's `+default`
               markers, which the v2 document does not carry; listed below by hand)

Usage:
    python3 scripts/gen-patch-strategies.py [SWAGGER_JSON] [--source TEXT]

Without SWAGGER_JSON the document of Kubernetes v1.33.0 is downloaded from GitHub. --source
says in the generated header where the file came from (default: its path or URL).
Python 3 standard library only.
"""

import hashlib
import json
import os
import re
import sys
import urllib.request

DEFAULT_URL = (
    "https://raw.githubusercontent.com/kubernetes/kubernetes/v1.33.0/api/openapi-spec/swagger.json"
)
OUT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "..",
    "crates",
    "api",
    "src",
    "patch_strategy",
    "generated.rs",
)
REF_PREFIX = "#/definitions/"

# Definitions that are scalars in JSON (strings or numbers): a property referring to one says
# nothing a merge needs, so it is left out unless it carries an extension.
SCALAR_DEFS = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time",
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime",
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
}

# Optional list-map key fields and their defaults (JSON), from upstream's `+default` markers on
# the Go types (they appear in the OpenAPI v3 documents only). Server-side apply keys an item
# that leaves such a field out by its default, e.g. k:{"containerPort":80,"protocol":"TCP"}.
KEY_DEFAULTS = [
    ("io.k8s.api.core.v1.ContainerPort", "protocol", '"TCP"'),
    ("io.k8s.api.core.v1.ServicePort", "protocol", '"TCP"'),
]


def load(argv):
    source = None
    args = []
    i = 0
    while i < len(argv):
        if argv[i] == "--source":
            source = argv[i + 1]
            i += 2
        else:
            args.append(argv[i])
            i += 1
    if args:
        with open(args[0], "rb") as f:
            data = f.read()
        source = source or args[0]
    else:
        with urllib.request.urlopen(DEFAULT_URL) as r:
            data = r.read()
        source = source or DEFAULT_URL
    return json.loads(data), source, hashlib.sha256(data).hexdigest()


def ref_name(schema):
    ref = (schema or {}).get("$ref", "")
    return ref[len(REF_PREFIX):] if ref.startswith(REF_PREFIX) else ""


def rust_str(s):
    return json.dumps(s)


def field_entry(owner, name, prop):
    """The table entry of one property, or None when it has nothing a merge needs."""
    if ref_name(prop):
        shape, child = "Object", ref_name(prop)
    elif prop.get("type") == "array":
        shape, child = "List", ref_name(prop.get("items"))
    elif prop.get("type") == "object" and "additionalProperties" in prop:
        shape, child = "Map", ref_name(prop.get("additionalProperties"))
    else:
        shape, child = "Scalar", ""
    if child in SCALAR_DEFS:
        child = ""
    strategy = prop.get("x-kubernetes-patch-strategy", "")
    merge_key = prop.get("x-kubernetes-patch-merge-key", "")
    list_type = prop.get("x-kubernetes-list-type", "")
    keys = prop.get("x-kubernetes-list-map-keys", [])
    map_type = prop.get("x-kubernetes-map-type", "")
    if not (child or strategy or merge_key or list_type or keys or map_type):
        return None
    # Objects and scalars are what a merge assumes without an entry; lists and maps with no
    # extensions and no typed items are atomic, also the default.
    return (owner, name, shape, child, strategy, merge_key, list_type, keys, map_type)


def main():
    doc, source, digest = load(sys.argv[1:])
    defs = doc["definitions"]
    fields = []
    map_types = []
    roots = {}
    for owner in sorted(defs):
        d = defs[owner]
        if d.get("x-kubernetes-map-type"):
            map_types.append((owner, d["x-kubernetes-map-type"]))
        gvks = d.get("x-kubernetes-group-version-kind") or []
        if len(gvks) == 1:
            g = gvks[0]
            roots[(g.get("group", ""), g["version"], g["kind"])] = owner
        for name in sorted(d.get("properties") or {}):
            e = field_entry(owner, name, d["properties"][name])
            if e:
                fields.append(e)
    for owner, field, _ in KEY_DEFAULTS:
        if field not in (defs.get(owner, {}).get("properties") or {}):
            sys.exit(f"KEY_DEFAULTS names {owner}.{field}, which the document does not have")

    out = []
    w = out.append
    w("// @generated by scripts/gen-patch-strategies.py -- do not edit by hand.")
    w("//")
    w(f"// From: {source}")
    w(f"// sha256 of that file: {digest}")
    w("// (Kubernetes' api/openapi-spec/swagger.json; the document itself is not committed.)")
    w("// Regenerate with:")
    w("//   python3 scripts/gen-patch-strategies.py [path/to/swagger.json]")
    w("// (without a path it downloads Kubernetes v1.33.0's document from GitHub).")
    w("")
    w("use super::{FieldInfo, Shape};")
    w("")
    w("#[allow(clippy::too_many_arguments)]")
    w("const fn f(")
    w("    owner: &'static str,")
    w("    name: &'static str,")
    w("    shape: Shape,")
    w("    child: &'static str,")
    w("    patch_strategy: &'static str,")
    w("    patch_merge_key: &'static str,")
    w("    list_type: &'static str,")
    w("    list_map_keys: &'static [&'static str],")
    w("    map_type: &'static str,")
    w(") -> FieldInfo {")
    w("    FieldInfo {")
    w("        owner,")
    w("        name,")
    w("        shape,")
    w("        child,")
    w("        patch_strategy,")
    w("        patch_merge_key,")
    w("        list_type,")
    w("        list_map_keys,")
    w("        map_type,")
    w("    }")
    w("}")
    w("")
    w("use Shape::{List, Map, Object, Scalar};")
    w("")
    w("/// Every property that refers to another definition or carries a list, map or patch")
    w("/// extension, sorted by (definition, property).")
    w("#[rustfmt::skip]")
    w("pub(super) static FIELDS: &[FieldInfo] = &[")
    for owner, name, shape, child, strategy, key, list_type, keys, map_type in fields:
        keys_s = "&[" + ", ".join(rust_str(k) for k in keys) + "]"
        w(
            f"    f({rust_str(owner)}, {rust_str(name)}, {shape}, {rust_str(child)}, "
            f"{rust_str(strategy)}, {rust_str(key)}, {rust_str(list_type)}, {keys_s}, "
            f"{rust_str(map_type)}),"
        )
    w("];")
    w("")
    w("/// Definitions marked `x-kubernetes-map-type`, sorted.")
    w("#[rustfmt::skip]")
    w("pub(super) static MAP_TYPES: &[(&str, &str)] = &[")
    for owner, mt in map_types:
        w(f"    ({rust_str(owner)}, {rust_str(mt)}),")
    w("];")
    w("")
    w("/// (group, version, kind) -> the kind's definition, sorted.")
    w("#[rustfmt::skip]")
    w("pub(super) static ROOTS: &[(&str, &str, &str, &str)] = &[")
    for (g, v, k) in sorted(roots):
        w(f"    ({rust_str(g)}, {rust_str(v)}, {rust_str(k)}, {rust_str(roots[(g, v, k)])}),")
    w("];")
    w("")
    w("/// (list item definition, key field, default as JSON) of optional list-map keys, sorted.")
    w("#[rustfmt::skip]")
    w("pub(super) static KEY_DEFAULTS: &[(&str, &str, &str)] = &[")
    for owner, field, default in sorted(KEY_DEFAULTS):
        w(f"    ({rust_str(owner)}, {rust_str(field)}, {rust_str(default)}),")
    w("];")
    text = "\n".join(out) + "\n"
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write(text)
    print(
        f"wrote {os.path.normpath(OUT)}: {len(fields)} fields, {len(map_types)} map types, "
        f"{len(roots)} kinds",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
