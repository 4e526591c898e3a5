//! One log record of the embedded datastore as read back from the disk
//! (`r8s_store::embedded::fuzz_record`).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| r8s_store::embedded::fuzz_record(data));
