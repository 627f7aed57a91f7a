//! How a path appears in oxccl's messages.

/// A path as oxccl's messages show it: its bytes, control characters and bytes that are not
/// UTF-8 escaped (`\e`, `\xff`; [`core::text`](mod@crate::core::text) states the rule), so a hostile file name never
/// writes them to a terminal.
pub fn escaped_path(path: &std::path::Path) -> oxccl_core::text::EscapedBytes<'_> {
    oxccl_core::text::EscapedBytes(path.as_os_str().as_encoded_bytes())
}
