//! The observatory behind `lardon top` (under construction).
