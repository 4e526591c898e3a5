//! The expressions of MutatingAdmissionPolicies (admissionregistration.k8s.io/v1alpha1):
//! an apply configuration built with typed object literals,
//!
//! ```text
//! Object{spec: Object.spec{template: Object.spec.template{metadata: Object.spec.template.metadata{labels: {"a": "b"}}}}}
//! ```
//!
//! or a list of JSON patch operations, `[JSONPatch{op: "add", path: "/metadata/labels/a", value: "b"}]`.
//!
//! Upstream declares a type for every path of the object's schema. The `cel` crate constructs
//! only struct types registered with the environment, by their exact names, so each expression
//! is compiled with an environment of its own: the shared libraries, and a struct type for each
//! `Object…` name the expression uses and for `JSONPatch`. What such a literal makes is a map
//! of its fields, which [`to_json`] turns into the patch.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ::cel::common::ast::{EntryExpr, Expr as Ast, IdedExpr};
use ::cel::common::types::Type;
use ::cel::common::value::{CowVal, Val};
use ::cel::objects::{Key, Map};
use ::cel::{ExecutionError, StructType};
use base64::Engine;
use serde_json::Value as Json;

use super::{Expr, Value};

/// A struct type whose literals make maps of their fields.
struct Fields(Type);

impl StructType for Fields {
    fn get_type(&self) -> &Type {
        &self.0
    }

    fn new_value<'b, 'v>(
        &self,
        fields: BTreeMap<String, CowVal<'b, 'v>>,
    ) -> Result<Box<dyn Val + 'v>, ExecutionError> {
        let mut map = HashMap::new();
        for (k, v) in fields {
            let v = Value::try_from(v.as_ref())
                .map_err(|_| ExecutionError::function_error(self.0.name(), "unsupported field value"))?;
            map.insert(Key::String(Arc::new(k)), v);
        }
        let val: Box<dyn Val> = Value::Map(Map { map: Arc::new(map) }).try_into()?;
        Ok(val)
    }
}

/// The struct type names an expression's literals use.
fn struct_names(e: &IdedExpr, out: &mut Vec<String>) {
    match &e.expr {
        Ast::Struct(s) => {
            if !out.contains(&s.type_name) {
                out.push(s.type_name.clone());
            }
            for entry in &s.entries {
                if let EntryExpr::StructField(f) = &entry.expr {
                    struct_names(&f.value, out);
                }
            }
        }
        Ast::Call(c) => {
            if let Some(t) = &c.target {
                struct_names(t, out);
            }
            for a in &c.args {
                struct_names(a, out);
            }
        }
        Ast::Comprehension(c) => {
            for part in [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                struct_names(part, out);
            }
        }
        Ast::List(l) => l.elements.iter().for_each(|i| struct_names(i, out)),
        Ast::Map(m) => {
            for entry in &m.entries {
                if let EntryExpr::MapEntry(m) = &entry.expr {
                    struct_names(&m.key, out);
                    struct_names(&m.value, out);
                }
            }
        }
        Ast::Select(s) => struct_names(&s.operand, out),
        Ast::Ident(_) | Ast::Literal(_) | Ast::Unspecified => {}
    }
}

/// Compile a mutation's expression (see the module's documentation).
pub(crate) fn compile(source: &str) -> Expr {
    let mut names = vec!["JSONPatch".to_owned()];
    if super::too_deep(source).is_none() {
        if let Ok(ast) = super::on_parser_stack(|| super::env().parser().parse(source)) {
            struct_names(&ast, &mut names);
        }
    }
    let env = (|| {
        let mut env = super::kubernetes_env()?;
        for name in names
            .iter()
            .filter(|n| *n == "JSONPatch" || *n == "Object" || n.starts_with("Object."))
        {
            env.add_type(Fields(Type::new_struct(name.clone())))?;
        }
        Ok::<_, ::cel::DeclarationError>(env)
    })();
    match env {
        Ok(env) => Expr::compile_in(Arc::new(env), source),
        Err(e) => Expr::failed(source, e.to_string()),
    }
}

/// A CEL value as JSON: maps with string keys as objects, bytes as base64, timestamps in RFC
/// 3339, durations as Go prints them. Not the `cel` crate's `Value::json` (its `json`
/// feature): that writes a duration as a number of nanoseconds (an object's duration field is
/// a Go duration string), a NaN as null and a non-string key as its text, where a patch must
/// rather fail.
pub(crate) fn to_json(v: &Value) -> Result<Json, String> {
    Ok(match v {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(i) => Json::from(*i),
        Value::UInt(u) => Json::from(*u),
        Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Json::Number)
            .ok_or_else(|| format!("{f} is not a JSON number"))?,
        Value::String(s) => Json::String(s.to_string()),
        Value::Bytes(b) => Json::String(base64::engine::general_purpose::STANDARD.encode(b.as_slice())),
        Value::List(items) => Json::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        Value::Map(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m.map.iter() {
                let Key::String(k) = k else {
                    return Err(format!("a map key must be a string, not {k:?}"));
                };
                out.insert(k.to_string(), to_json(v)?);
            }
            Json::Object(out)
        }
        Value::Timestamp(t) => Json::String(t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)),
        Value::Duration(d) => Json::String(r8s_api::duration::format(d.to_std().map_err(|e| e.to_string())?)),
        other => return Err(format!("{other:?} has no JSON form")),
    })
}
