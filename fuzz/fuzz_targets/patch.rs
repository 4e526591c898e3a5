//! See `r8s_apiserver::fuzzing::patch`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| r8s_apiserver::fuzzing::patch(data));
