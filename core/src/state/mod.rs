//! State machines as plain data and transition functions. Time is passed in, never read here.

pub mod group_call;
pub mod lifecycle;
pub mod wait;
pub mod work;
