//! See `r8s_kubelet::translate::fuzz_session`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| r8s_kubelet::translate::fuzz_session(data));
