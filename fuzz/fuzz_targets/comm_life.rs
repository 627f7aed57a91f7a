#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| oxccl_fuzz_bodies::comm_life::fuzz(data));
