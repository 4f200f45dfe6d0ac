//! smelt-tree (being written).
