//! CEL for the API server (ValidatingAdmissionPolicies, webhook matchConditions): the `cel`
//! crate's parser and interpreter with Kubernetes objects as its variables.

use std::sync::Arc;

pub(crate) use ::cel::Value;
use ::cel::{Context, Program};

/// A compiled expression with its source (for messages).
pub(crate) struct Expr {
    pub source: String,
    program: Result<Program, String>,
}

impl Expr {
    pub fn compile(source: &str) -> Self {
        Self {
            source: source.to_owned(),
            program: Program::compile(source).map_err(|e| e.to_string()),
        }
    }

    /// Why the expression does not compile, if it does not.
    pub fn compile_error(&self) -> Option<&str> {
        self.program.as_ref().err().map(String::as_str)
    }

    /// Evaluate with `vars` (name, value) bound.
    pub fn eval(&self, vars: &[(&str, Value)]) -> Result<Value, String> {
        let program = self.program.as_ref().map_err(Clone::clone)?;
        let mut ctx = Context::default();
        for (name, v) in vars {
            ctx.add_variable_from_value(*name, v.clone());
        }
        program.execute(&ctx).map_err(|e| e.to_string())
    }

    /// Evaluate to a boolean (an error if the result is of another type).
    pub fn eval_bool(&self, vars: &[(&str, Value)]) -> Result<bool, String> {
        match self.eval(vars)? {
            Value::Bool(b) => Ok(b),
            other => Err(format!(
                "expression '{}' resulted in a non-bool value: {other:?}",
                self.source
            )),
        }
    }
}

/// A JSON value as CEL sees it: integers as int (or uint beyond int's range), other numbers
/// as double, objects as maps with string keys, null as null.
pub(crate) fn value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::UInt(u),
            _ => Value::Float(n.as_f64().unwrap_or(0.0)),
        },
        serde_json::Value::String(s) => Value::String(Arc::new(s.clone())),
        serde_json::Value::Array(items) => Value::List(Arc::new(items.iter().map(value).collect())),
        serde_json::Value::Object(m) => {
            let map: std::collections::HashMap<::cel::objects::Key, Value> = m
                .iter()
                .map(|(k, v)| (::cel::objects::Key::String(Arc::new(k.clone())), value(v)))
                .collect();
            Value::Map(::cel::objects::Map { map: Arc::new(map) })
        }
    }
}

/// A CEL map of string keys.
pub(crate) fn map<'a>(entries: impl IntoIterator<Item = (&'a String, &'a Value)>) -> Value {
    let map: std::collections::HashMap<::cel::objects::Key, Value> = entries
        .into_iter()
        .map(|(k, v)| (::cel::objects::Key::String(Arc::new(k.clone())), v.clone()))
        .collect();
    Value::Map(::cel::objects::Map { map: Arc::new(map) })
}

/// A CEL string result as Rust text.
pub(crate) fn as_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn objects_are_variables_of_expressions() {
        let obj = value(&json!({"spec": {"replicas": 3, "name": "web"}, "metadata": {"labels": {"a": "b"}}}));
        let e = Expr::compile("object.spec.replicas > 1 && object.metadata.labels.a == 'b'");
        assert_eq!(e.eval_bool(&[("object", obj.clone())]), Ok(true));
        let e = Expr::compile("has(object.spec.missing)");
        assert_eq!(e.eval_bool(&[("object", obj.clone())]), Ok(false));
        let e = Expr::compile("'name: ' + object.spec.name");
        assert_eq!(
            as_string(&e.eval(&[("object", obj.clone())]).unwrap()).as_deref(),
            Some("name: web")
        );
        // A string plus an int is a runtime error, as upstream's CEL has it.
        assert!(Expr::compile("'n: ' + object.spec.replicas")
            .eval(&[("object", obj)])
            .is_err());
        assert!(Expr::compile("object.spec.(").compile_error().is_some());
    }
}
