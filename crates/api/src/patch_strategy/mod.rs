//! How the properties of Kubernetes' types merge, keyed by type path: for a definition such as
//! `io.k8s.api.core.v1.PodSpec` and one of its properties, the definition its value (or list
//! items, or map values) has and upstream's `x-kubernetes-*` patch, list and map extensions.
//! The table is generated from upstream's OpenAPI document by `scripts/gen-patch-strategies.py`
//! (see `generated.rs`); strategic merge patch, server-side apply and the served OpenAPI schemas
//! all read it, walking an object with a [`Node`] as they descend.

mod generated;

use generated::{FIELDS, KEY_DEFAULTS, MAP_TYPES, ROOTS};

/// The definition of every object's `metadata`.
pub const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
/// Embedded objects of any kind: atomic for server-side apply, as upstream treats them.
const RAW_EXTENSION: &str = "io.k8s.apimachinery.pkg.runtime.RawExtension";

/// What a property's value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// An object of the definition `child`.
    Object,
    /// A list, its items of the definition `child` (or primitives when `child` is empty).
    List,
    /// A map (`additionalProperties`), its values of the definition `child` (or primitives).
    Map,
    /// A primitive with an extension (e.g. an atomic byte string).
    Scalar,
}

/// One property of one definition.
#[derive(Debug, PartialEq, Eq)]
pub struct FieldInfo {
    /// The definition the property belongs to, e.g. `io.k8s.api.core.v1.PodSpec`.
    pub owner: &'static str,
    pub name: &'static str,
    pub shape: Shape,
    /// The definition of the value, list items or map values; empty for primitives.
    pub child: &'static str,
    /// `x-kubernetes-patch-strategy`: `merge`, `replace`, `retainKeys` or `merge,retainKeys`.
    pub patch_strategy: &'static str,
    /// `x-kubernetes-patch-merge-key`.
    pub patch_merge_key: &'static str,
    /// `x-kubernetes-list-type`: `atomic`, `set` or `map`.
    pub list_type: &'static str,
    /// `x-kubernetes-list-map-keys`.
    pub list_map_keys: &'static [&'static str],
    /// `x-kubernetes-map-type` of the property: `atomic` or `granular`.
    pub map_type: &'static str,
}

/// How server-side apply tracks the items of a list (structured-merge-diff's element
/// relationship).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListKind {
    /// The whole list is one value.
    Atomic,
    /// Items are tracked by value (`v:"x"`).
    Set,
    /// Items are tracked by these key fields (`k:{"name":"web"}`).
    Map(&'static [&'static str]),
}

impl FieldInfo {
    /// The definition of the value, list items or map values.
    pub fn child(&self) -> Option<&'static str> {
        Some(self.child).filter(|c| !c.is_empty())
    }

    fn strategies(&self) -> impl Iterator<Item = &'static str> {
        self.patch_strategy.split(',').filter(|s| !s.is_empty())
    }

    /// Strategic merge patch merges this list rather than replacing it.
    pub fn smp_merges(&self) -> bool {
        self.strategies().any(|s| s == "merge")
    }

    /// The key strategic merge patch matches this list's items by.
    pub fn smp_merge_key(&self) -> Option<&'static str> {
        Some(self.patch_merge_key).filter(|k| !k.is_empty() && self.smp_merges())
    }

    /// The property is tagged `retainKeys`.
    pub fn retains_keys(&self) -> bool {
        self.strategies().any(|s| s == "retainKeys")
    }

    /// How server-side apply tracks the list's items: by `x-kubernetes-list-type` (and its
    /// map keys), or, without one, by the patch strategy (`merge` with a merge key is a map
    /// keyed by it, `merge` without one a set), as upstream converts its OpenAPI for
    /// structured-merge-diff; anything else is atomic.
    pub fn ssa_list(&'static self) -> ListKind {
        match self.list_type {
            "set" => ListKind::Set,
            "map" if !self.list_map_keys.is_empty() => ListKind::Map(self.list_map_keys),
            "" if self.smp_merges() && !self.patch_merge_key.is_empty() => {
                ListKind::Map(std::slice::from_ref(&self.patch_merge_key))
            }
            "" if self.smp_merges() => ListKind::Set,
            _ => ListKind::Atomic,
        }
    }
}

/// The entry of `prop` of the definition `type_name`.
pub fn field(type_name: &str, prop: &str) -> Option<&'static FieldInfo> {
    FIELDS
        .binary_search_by(|f| (f.owner, f.name).cmp(&(type_name, prop)))
        .ok()
        .map(|i| &FIELDS[i])
}

/// The definition of the value of `prop` of `type_name` (or of its list items or map values).
pub fn child_type(type_name: &str, prop: &str) -> Option<&'static str> {
    field(type_name, prop).and_then(FieldInfo::child)
}

/// Every entry of the definition `type_name`, sorted by property.
pub fn fields_of(type_name: &str) -> &'static [FieldInfo] {
    let start = FIELDS.partition_point(|f| f.owner < type_name);
    let end = FIELDS.partition_point(|f| f.owner <= type_name);
    &FIELDS[start..end]
}

/// Every entry, sorted by (definition, property).
pub fn all_fields() -> &'static [FieldInfo] {
    FIELDS
}

/// The definition of a kind, e.g. `("apps", "v1", "Deployment")` →
/// `io.k8s.api.apps.v1.Deployment` (`""` is the core group).
pub fn root_type(group: &str, version: &str, kind: &str) -> Option<&'static str> {
    ROOTS
        .binary_search_by(|(g, v, k, _)| (*g, *v, *k).cmp(&(group, version, kind)))
        .ok()
        .map(|i| ROOTS[i].3)
}

/// `x-kubernetes-map-type` of the definition itself (e.g. `LabelSelector` is atomic).
pub fn map_type(type_name: &str) -> Option<&'static str> {
    MAP_TYPES
        .binary_search_by(|(t, _)| (*t).cmp(type_name))
        .ok()
        .map(|i| MAP_TYPES[i].1)
}

/// The default (as JSON) of the optional list-map key `key` of the list item definition
/// `item_type`, e.g. a container port's `protocol` is `"TCP"`.
pub fn key_default(item_type: &str, key: &str) -> Option<&'static str> {
    KEY_DEFAULTS
        .binary_search_by(|(t, k, _)| (*t, *k).cmp(&(item_type, key)))
        .ok()
        .map(|i| KEY_DEFAULTS[i].2)
}

/// Every (list item definition, key field, default as JSON) of optional list-map keys.
pub fn key_defaults() -> &'static [(&'static str, &'static str, &'static str)] {
    KEY_DEFAULTS
}

/// Where a walk over an object stands: the type of the value at hand, as far as it is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    /// A value of no known type: lists in it are atomic.
    Unknown,
    /// The root of an object of no known type; its `metadata` is still `ObjectMeta`.
    UnknownRoot,
    /// An object of this definition.
    Def(&'static str),
    /// The value of this property.
    Field(&'static FieldInfo),
    /// A value of a custom resource, typed by its CRD's schema.
    Schema(&'static SchemaNode),
}

/// What server-side apply needs of a custom resource's structural schema (its CRD version's
/// `openAPIV3Schema`): which lists are sets or keyed maps (`x-kubernetes-list-type`,
/// `x-kubernetes-list-map-keys`) and which objects are atomic (`x-kubernetes-map-type`). Made
/// once per served definition and kept for the life of the process, so that a [`Node`] stays
/// a copyable reference.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SchemaNode {
    properties: std::collections::BTreeMap<String, SchemaNode>,
    /// The schema of a map's values (`additionalProperties`).
    additional: Option<Box<SchemaNode>>,
    /// The schema of a list's items.
    items: Option<Box<SchemaNode>>,
    list: Option<ListKind>,
    atomic_map: bool,
    /// The root or an embedded resource (`x-kubernetes-embedded-resource`): its `metadata` is
    /// an ObjectMeta.
    object_meta: bool,
}

impl SchemaNode {
    /// The node of `schema`, the root of a kind, allocated for the life of the process (list
    /// map keys included).
    pub fn leaked(schema: &serde_json::Value) -> &'static SchemaNode {
        let mut root = Self::of(schema);
        root.object_meta = true;
        Box::leak(Box::new(root))
    }

    fn of(schema: &serde_json::Value) -> SchemaNode {
        let ext = |k: &str| schema.get(k).and_then(serde_json::Value::as_str);
        let list = match ext("x-kubernetes-list-type") {
            Some("set") => Some(ListKind::Set),
            Some("map") => {
                let keys: Vec<&'static str> = schema["x-kubernetes-list-map-keys"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(serde_json::Value::as_str)
                    .map(|k| &*Box::leak(k.to_owned().into_boxed_str()))
                    .collect();
                (!keys.is_empty()).then(|| ListKind::Map(Box::leak(keys.into_boxed_slice())))
            }
            _ => None,
        };
        let child = |k: &str| {
            schema
                .get(k)
                .filter(|v| v.is_object())
                .map(|v| Box::new(Self::of(v)))
        };
        SchemaNode {
            properties: schema["properties"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), Self::of(v)))
                .collect(),
            additional: child("additionalProperties"),
            items: child("items"),
            list,
            atomic_map: ext("x-kubernetes-map-type") == Some("atomic"),
            object_meta: schema["x-kubernetes-embedded-resource"] == serde_json::Value::Bool(true),
        }
    }
}

impl Node {
    /// The root of an object of the kind, or [`Node::UnknownRoot`].
    pub fn root(group: &str, version: &str, kind: &str) -> Node {
        Node::of(root_type(group, version, kind))
    }

    /// The root of an object of the definition `type_name`, or [`Node::UnknownRoot`].
    pub fn of(type_name: Option<&'static str>) -> Node {
        type_name.map(Node::Def).unwrap_or(Node::UnknownRoot)
    }

    /// The definition of this value when it is an object of a known type.
    pub fn def(self) -> Option<&'static str> {
        match self {
            Node::Def(t) => Some(t),
            Node::Field(f) if f.shape == Shape::Object => f.child(),
            _ => None,
        }
    }

    /// The property entry of this value, when it is a known property.
    pub fn info(self) -> Option<&'static FieldInfo> {
        match self {
            Node::Field(f) => Some(f),
            _ => None,
        }
    }

    /// The value of the member `key` of this object (or map).
    pub fn member(self, key: &str) -> Node {
        match self {
            Node::UnknownRoot if key == "metadata" => Node::Def(OBJECT_META),
            Node::Schema(n) if n.object_meta && key == "metadata" => Node::Def(OBJECT_META),
            Node::Schema(n) => n
                .properties
                .get(key)
                .or(n.additional.as_deref())
                .map(Node::Schema)
                .unwrap_or(Node::Unknown),
            Node::Field(f) if f.shape == Shape::Map => f.child().map(Node::Def).unwrap_or(Node::Unknown),
            _ => match self.def() {
                Some(t) => field(t, key)
                    .map(|f| match (f.shape, f.child()) {
                        // A plain reference says no more than its definition.
                        (Shape::Object, Some(c)) if f.map_type.is_empty() => Node::Def(c),
                        _ => Node::Field(f),
                    })
                    .unwrap_or(Node::Unknown),
                None => Node::Unknown,
            },
        }
    }

    /// The items of this list.
    pub fn item(self) -> Node {
        match self {
            Node::Schema(n) => n.items.as_deref().map(Node::Schema).unwrap_or(Node::Unknown),
            Node::Field(f) if f.shape == Shape::List => f.child().map(Node::Def).unwrap_or(Node::Unknown),
            _ => Node::Unknown,
        }
    }

    /// The list entry of this value, when it is a list property.
    pub fn list(self) -> Option<&'static FieldInfo> {
        self.info().filter(|f| f.shape == Shape::List)
    }

    /// How server-side apply tracks the items of this list ([`FieldInfo::ssa_list`]; a custom
    /// resource's by its schema's list type); lists of no known type are atomic.
    pub fn ssa_list(self) -> ListKind {
        match self {
            Node::Schema(n) => n.list.unwrap_or(ListKind::Atomic),
            _ => self.list().map(|f| f.ssa_list()).unwrap_or(ListKind::Atomic),
        }
    }

    /// Server-side apply treats this object or map as one value (`x-kubernetes-map-type:
    /// atomic` on the property or its definition, or an embedded object of any kind).
    pub fn is_atomic_map(self) -> bool {
        if let Node::Schema(n) = self {
            return n.atomic_map;
        }
        if self.info().is_some_and(|f| f.map_type == "atomic") {
            return true;
        }
        match self.def() {
            Some(RAW_EXTENSION) => true,
            Some(t) => map_type(t) == Some("atomic"),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_sorted_for_binary_search() {
        assert!(FIELDS
            .windows(2)
            .all(|w| (w[0].owner, w[0].name) < (w[1].owner, w[1].name)));
        assert!(MAP_TYPES.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(ROOTS
            .windows(2)
            .all(|w| (w[0].0, w[0].1, w[0].2) < (w[1].0, w[1].1, w[1].2)));
        assert!(KEY_DEFAULTS
            .windows(2)
            .all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1)));
    }

    #[test]
    fn lookups_by_type_path() {
        let tsc = field("io.k8s.api.core.v1.PodSpec", "topologySpreadConstraints").unwrap();
        assert_eq!(tsc.shape, Shape::List);
        assert_eq!(tsc.child, "io.k8s.api.core.v1.TopologySpreadConstraint");
        assert_eq!(tsc.smp_merge_key(), Some("topologyKey"));
        assert_eq!(
            tsc.ssa_list(),
            ListKind::Map(&["topologyKey", "whenUnsatisfiable"])
        );
        let ports = field("io.k8s.api.core.v1.Container", "ports").unwrap();
        assert_eq!(ports.smp_merge_key(), Some("containerPort"));
        assert_eq!(ports.ssa_list(), ListKind::Map(&["containerPort", "protocol"]));
        assert_eq!(
            field("io.k8s.api.core.v1.ServiceSpec", "ports")
                .unwrap()
                .smp_merge_key(),
            Some("port")
        );
        // The same name elsewhere is another property.
        assert!(field("io.k8s.api.core.v1.EndpointSubset", "ports")
            .unwrap()
            .smp_merge_key()
            .is_none());
        let volumes = field("io.k8s.api.core.v1.PodSpec", "volumes").unwrap();
        assert!(volumes.smp_merges() && volumes.retains_keys());
        let finalizers = field(OBJECT_META, "finalizers").unwrap();
        assert!(finalizers.smp_merges());
        assert_eq!(finalizers.smp_merge_key(), None);
        assert_eq!(finalizers.ssa_list(), ListKind::Set);
        assert_eq!(
            field(OBJECT_META, "ownerReferences").unwrap().ssa_list(),
            ListKind::Map(&["uid"])
        );
        let tolerations = field("io.k8s.api.core.v1.PodSpec", "tolerations").unwrap();
        assert_eq!(tolerations.smp_merge_key(), None);
        assert_eq!(tolerations.ssa_list(), ListKind::Atomic);
        assert!(field("io.k8s.api.apps.v1.DeploymentSpec", "strategy")
            .unwrap()
            .retains_keys());
        assert_eq!(
            child_type("io.k8s.api.apps.v1.DeploymentSpec", "template"),
            Some("io.k8s.api.core.v1.PodTemplateSpec")
        );
        assert_eq!(child_type("io.k8s.api.core.v1.PodSpec", "nope"), None);
        assert_eq!(fields_of("io.k8s.api.core.v1.PodSpec").len(), 17);
        assert!(fields_of("io.k8s.api.core.v1.PodSpec")
            .iter()
            .all(|f| f.owner == "io.k8s.api.core.v1.PodSpec"));
        assert_eq!(
            map_type("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"),
            Some("atomic")
        );
        assert_eq!(
            key_default("io.k8s.api.core.v1.ContainerPort", "protocol"),
            Some("\"TCP\"")
        );
    }

    #[test]
    fn custom_resources_are_walked_by_their_schema() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "ports": {"type": "array", "x-kubernetes-list-type": "map",
                              "x-kubernetes-list-map-keys": ["name", "protocol"],
                              "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                    "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "selector": {"type": "object", "x-kubernetes-map-type": "atomic"},
                    "labels": {"type": "object", "additionalProperties": {"type": "object",
                               "properties": {"hosts": {"type": "array", "x-kubernetes-list-type": "set"}}}},
                    "template": {"type": "object", "x-kubernetes-embedded-resource": true},
                }},
            },
        });
        let root = Node::Schema(SchemaNode::leaked(&schema));
        let spec = root.member("spec");
        assert_eq!(
            spec.member("ports").ssa_list(),
            ListKind::Map(&["name", "protocol"])
        );
        assert_eq!(spec.member("tags").ssa_list(), ListKind::Set);
        // Without a list type, a custom resource's list is atomic.
        assert_eq!(spec.member("args").ssa_list(), ListKind::Atomic);
        assert!(spec.member("selector").is_atomic_map());
        assert!(!spec.is_atomic_map());
        // Map values, list items and metadata (the root's, an embedded resource's).
        assert_eq!(
            spec.member("labels").member("any").member("hosts").ssa_list(),
            ListKind::Set
        );
        assert!(matches!(
            spec.member("ports").item().member("name"),
            Node::Schema(_)
        ));
        assert_eq!(root.member("metadata"), Node::Def(OBJECT_META));
        assert_eq!(spec.member("template").member("metadata"), Node::Def(OBJECT_META));
        assert_eq!(spec.member("nope"), Node::Unknown);
    }

    #[test]
    fn roots_of_kinds_and_walking_an_object() {
        assert_eq!(
            root_type("apps", "v1", "Deployment"),
            Some("io.k8s.api.apps.v1.Deployment")
        );
        assert_eq!(root_type("", "v1", "Pod"), Some("io.k8s.api.core.v1.Pod"));
        assert_eq!(
            root_type("autoscaling", "v1", "Scale"),
            Some("io.k8s.api.autoscaling.v1.Scale")
        );
        assert_eq!(root_type("example.com", "v1", "Widget"), None);
        let d = Node::root("apps", "v1", "Deployment");
        let pod_spec = d.member("spec").member("template").member("spec");
        assert_eq!(pod_spec, Node::Def("io.k8s.api.core.v1.PodSpec"));
        let containers = pod_spec.member("containers");
        assert_eq!(containers.list().unwrap().smp_merge_key(), Some("name"));
        assert_eq!(containers.item(), Node::Def("io.k8s.api.core.v1.Container"));
        assert_eq!(d.member("metadata"), Node::Def(OBJECT_META));
        assert_eq!(d.member("metadata").member("labels").member("app"), Node::Unknown);
        assert!(d.member("spec").member("selector").is_atomic_map());
        assert!(pod_spec.member("nodeSelector").is_atomic_map());
        assert!(!pod_spec.is_atomic_map());
        // An object of no known kind still has ObjectMeta.
        let unknown = Node::root("example.com", "v1", "Widget");
        assert_eq!(unknown.member("metadata"), Node::Def(OBJECT_META));
        assert_eq!(unknown.member("spec"), Node::Unknown);
        assert_eq!(unknown.member("spec").member("items").list(), None);
    }
}
