//! Benchmarks and the packing simulator for Lardon (under construction).
