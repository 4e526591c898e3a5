//! `-f`: objects from files, directories (`-R` for their subdirectories) and standard input
//! (`-`), YAML documents or JSON; `List` kinds unpacked as kubectl unpacks them.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::{msg, Result};

/// One object from `-f` and the file it came from (kubectl's errors name it).
pub struct Manifest {
    pub object: Value,
    pub source: String,
}

pub fn read(files: &[String], recursive: bool) -> Result<Vec<Manifest>> {
    let mut out = Vec::new();
    for f in files {
        if f == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| msg(e.to_string()))?;
            parse(&text, "STDIN", &mut out)?;
            continue;
        }
        let path = Path::new(f);
        if !path.exists() {
            return Err(msg(format!("the path \"{f}\" does not exist")));
        }
        if path.is_dir() {
            let mut entries = Vec::new();
            walk(path, recursive, &mut entries)?;
            for p in entries {
                let text = std::fs::read_to_string(&p).map_err(|e| msg(e.to_string()))?;
                parse(&text, &p.to_string_lossy(), &mut out)?;
            }
        } else {
            let text = std::fs::read_to_string(path).map_err(|e| msg(e.to_string()))?;
            parse(&text, f, &mut out)?;
        }
    }
    if out.is_empty() {
        return Err(msg("no objects passed to apply"));
    }
    Ok(out)
}

/// A directory's .json, .yaml and .yml files in name order (and its subdirectories' with -R).
fn walk(dir: &Path, recursive: bool, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| msg(e.to_string()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if recursive {
                walk(&p, recursive, out)?;
            }
        } else if matches!(
            p.extension().and_then(|e| e.to_str()),
            Some("json" | "yaml" | "yml")
        ) {
            out.push(p);
        }
    }
    Ok(())
}

fn parse(text: &str, source: &str, out: &mut Vec<Manifest>) -> Result<()> {
    let docs: Vec<Value> = if text.trim_start().starts_with('{') {
        vec![serde_json::from_str(text).map_err(|e| msg(format!("error parsing {source}: {e}")))?]
    } else {
        serde_saphyr::from_multiple(text).map_err(|e| {
            msg(format!(
                "error parsing {source}: error converting YAML to JSON: {e}"
            ))
        })?
    };
    for doc in docs {
        if doc.is_null() {
            continue;
        }
        if !doc.is_object() {
            return Err(msg(format!("error validating data: invalid object in {source}")));
        }
        if doc["kind"].as_str().is_none_or(str::is_empty) {
            return Err(msg(format!(
                "error validating \"{source}\": error validating data: kind not set; if you choose to ignore these errors, turn validation off with --validate=false"
            )));
        }
        if doc["apiVersion"].as_str().is_none_or(str::is_empty) {
            return Err(msg(format!(
                "error validating \"{source}\": error validating data: apiVersion not set; if you choose to ignore these errors, turn validation off with --validate=false"
            )));
        }
        if doc["kind"].as_str().is_some_and(|k| k.ends_with("List")) && doc["items"].is_array() {
            for item in doc["items"].as_array().cloned().unwrap_or_default() {
                out.push(Manifest {
                    object: item,
                    source: source.to_owned(),
                });
            }
            continue;
        }
        out.push(Manifest {
            object: doc,
            source: source.to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_and_lists() {
        let mut out = Vec::new();
        parse(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Secret\n  metadata:\n    name: b\n",
            "x.yaml",
            &mut out,
        )
        .unwrap();
        let names: Vec<&str> = out
            .iter()
            .map(|m| m.object["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
        let err = parse("metadata:\n  name: a\n", "y.yaml", &mut out).err().unwrap();
        assert!(err.to_string().contains("kind not set"), "{err}");
    }
}
