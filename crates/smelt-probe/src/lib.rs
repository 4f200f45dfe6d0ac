//! smelt-probe (being written).
