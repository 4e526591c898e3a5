//! See `r8s_api::fuzzing::quantity`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| r8s_api::fuzzing::quantity(data));
