//! C API (being written).
