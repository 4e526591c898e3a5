//! See `r8s_apiserver::fuzzing::query`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| r8s_apiserver::fuzzing::query(data));
