//! State machines as plain data and transition functions. Time is passed in, never read here.

pub mod lifecycle;
