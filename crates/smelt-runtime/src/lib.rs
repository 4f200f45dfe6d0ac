//! smelt-runtime (being written).
