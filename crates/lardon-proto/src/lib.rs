//! lardon-proto (under construction).
