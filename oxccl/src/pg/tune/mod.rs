//! Buffer modes per operation: the group's tune table ([`PgOptions::tune`]) says, for each
//! collective and size, whether buffers of the library's allocator ([`Memory::CommBuf`](crate::buffer::Memory::CommBuf)) are
//! used as they are, registered with the communicator, or put in a symmetric window; this
//! module applies it, caching each registration per (allocation, communicator).
//!
//! Why it cannot hang or free early:
//! - Window registration is collective. It is issued here, inside the operation, under the
//!   group's slot lock, so it happens at the same operation on every rank, as long as the
//!   ranks decide alike: the decision ([`TuneTable::choose`]) is pure, over the op and the
//!   table, and the ranks' tables are compared through the store when the communicator is
//!   made ([`agree`]): different tables are refused on every rank before any operation.
//!   (Ranks must also pass the same kinds of buffers, as they pass the same sizes.) Sends
//!   and receives are registered at most, never windowed: they involve two ranks.
//! - A registration keeps its allocation alive ([`CommMem::keep`]), and the cache lives in
//!   the group's communicator entry after the communicator: the communicator is destroyed
//!   (releasing what it registered) before the cache lets the memory go.
//! - A local registration whose buffer the user dropped is released at a later operation once
//!   its work has run (not collective, so any time is safe). Windows stay until the program
//!   releases them ([`ProcessGroup::release_windows`], collective: see `pg::buffer_modes`) or the
//!   group's communicator goes: drops need not line up across ranks, so no operation may
//!   release a window on its own. Window buffers are meant to be allocated once and reused,
//!   as NCCL advises.
//!
//! One operation, one kind of buffer: the buffers of an operation are all in windows or none is.
//! With NCCL 2.28.9 an all_to_all whose send buffer is in a window (made by an earlier all_reduce
//! on it) and whose receive buffer is not gives wrong results or hangs
//! (docs/BENCHMARKS.md#buffer-modes-and-the-tune-table); NCCL sees a window whatever the table says
//! for this operation. So an operation with some of its buffers in windows puts the others in
//! windows too (collective, decided from window state, which every rank made alike), and
//! groups with windows check this at every operation, table or not. One whose other buffer
//! cannot be (not the library's memory) is left as it is: the backend refuses it when it is
//! issued, naming that buffer, before anything of it reaches the library (the core's rule,
//! `oxccl_core::check::windows`, which the NCCL backend and the mock both apply, inside a
//! coalescing block too), so the rule has one copy.
//!
//! Graphs ([`ProcessGroup::capture`]): inside a capture nothing is registered or released,
//! only checked. A registration is a host call (a window's is collective, with its own
//! exchange between ranks), which a capture forbids; and it cannot wait until the capture
//! ends, because the library picks the kernel (symmetric or not) when the operation is
//! captured. Nor can the capture find out the buffers first: its closure runs once (it is
//! the program's code, with its own effects), so it cannot be dry-run. So the program
//! prepares the buffers before the capture, which only it can do at the right moment on
//! every rank: [`ProcessGroup::register_buffer`], or the same operations run once outside
//! the capture (the table registers them then, as nccl-tests' and PyTorch's warm-up runs
//! do). An operation captured on a buffer not yet in the mode the table asks for is refused
//! with [`CaptureError::Unsupported`] saying so. The graph then keeps the allocations it
//! uses that are registered ([`RegCache::pins`]), so their registrations outlive every
//! launch, and a launch still checks the buffers it binds by address and size.
//!
//! [`PgOptions::tune`]: super::options::PgOptions::tune
//! [`Memory::CommBuf`](crate::buffer::Memory::CommBuf): crate::buffer::Memory::CommBuf
//! [`ProcessGroup::release_windows`]: super::process_group::ProcessGroup::release_windows
//! [`ProcessGroup::register_buffer`]: super::process_group::ProcessGroup::register_buffer
//! [`ProcessGroup::capture`]: super::process_group::ProcessGroup::capture
//! [`TuneTable::choose`]: oxccl_rules::tune::TuneTable::choose
//! [`CommMem::keep`]: crate::buffer::CommMem::keep
//! [`CaptureError::Unsupported`]: oxccl_core::CaptureError::Unsupported
//! [`RegCache::pins`]: reg_cache::RegCache::pins
//! [`agree`]: agree::agree

pub(crate) mod agree;
pub(crate) mod prepare;
pub(crate) mod reg_cache;
