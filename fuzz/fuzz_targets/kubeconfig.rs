//! See `r8s_kubectl::config::fuzz_kubeconfig`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| r8s_kubectl::config::fuzz_kubeconfig(data));
