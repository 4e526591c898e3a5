//! Generates the OpenAPI v3 schemas of the built-in kinds (`components.schemas`, keyed by
//! Kubernetes' definition names) from k8s-openapi's `schemars` implementations, once, at build
//! time: the generator code for every type took about 5 MB of the binary, the JSON it writes
//! takes under 1 MB. `typed::openapi_schemas` picks the schemas a request needs out of it.

use std::path::PathBuf;

use k8s_openapi::schemars::{self, JsonSchema, SchemaGenerator};

include!("src/resource_types.rs");

macro_rules! roots {
    ($(($g:literal, $v:literal, $k:literal) => $($t:ident)::+ ,)*) => {
        fn roots(gen: &mut SchemaGenerator) -> Vec<serde_json::Value> {
            vec![$({
                gen.subschema_for::<k8s_openapi::$($t)::+>();
                let name = <k8s_openapi::$($t)::+ as JsonSchema>::schema_name();
                serde_json::json!([$g, $v, $k, name])
            }),*]
        }
    };
}

resource_types!(roots!());

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src/resource_types.rs");
    let mut gen = schemars::generate::SchemaSettings::openapi3().into_generator();
    // ListMeta too: list kinds (custom resources' among them) refer to it.
    gen.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta>();
    let list_meta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta::schema_name();
    let roots = roots(&mut gen);
    let definitions = gen.take_definitions(true);
    let out = serde_json::json!({
        "listMeta": list_meta,
        "roots": roots,
        "definitions": definitions,
    });
    let path = PathBuf::from(std::env::var_os("OUT_DIR").unwrap()).join("schemas.json");
    std::fs::write(path, serde_json::to_vec(&out).unwrap()).unwrap();
}
