//! Test support the oxccl packages' tests share (`oxccl/tests`, `cli/tests`): ranks as child
//! processes of a test binary ([`ranks`]) and the variables launchers give such processes
//! ([`launchers`]). Not published; helpers that one package's tests alone use stay with them.

pub mod launchers;
pub mod ranks;
