//! Linux probes and enforcement for the Lardon Governor.
