//! See `r8s_apiserver::fuzzing::object`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| r8s_apiserver::fuzzing::object(data));
