//! Statistics of measurements: one summary type, one median, one seeded RNG.
