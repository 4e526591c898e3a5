//! See `r8s_kubelet::agent::fuzz_cri_results`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| r8s_kubelet::agent::fuzz_cri_results(data));
