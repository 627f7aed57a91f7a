//! Exit codes: 0 ok, 1 a check failed or results were wrong, 2 usage, 3 environment.

/// A check failed or a result was wrong.
pub const FAILED: u8 = 1;
/// The command line is wrong (clap's own code for usage errors too).
pub const USAGE: u8 = 2;
/// The environment lacks something: no library, no GPU, a launcher half set up.
pub const ENV: u8 = 3;
