//! Uses both: oxccl's communicator type and cudarc's context, in one program.

fn main() {
    let _ = std::any::type_name::<oxccl::Comm>();
    let _ = cudarc::driver::CudaContext::new;
}
