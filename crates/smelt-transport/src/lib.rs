//! smelt-transport (being written).
