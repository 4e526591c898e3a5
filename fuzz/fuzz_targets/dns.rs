//! See `r8s_net::dns::fuzzing::query`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| r8s_net::dns::fuzzing::query(data));
