//! Issuing one checked operation: the native NCCL call where the library has it
//! ([`native`]), grouped send/recv where it does not ([`grouped`]: all-to-all, gather and
//! scatter before 2.28; the uneven variants always; all_gather_v / reduce_scatter_v as grouped
//! broadcasts / reduces, as PyTorch does).

mod barrier_scratch;
mod call_ctx;
pub(crate) mod configured;
mod first_failure;
mod grouped;
pub(crate) mod issue_op;
mod native;
mod pointers;
mod shape;

#[cfg(test)]
mod tests;
