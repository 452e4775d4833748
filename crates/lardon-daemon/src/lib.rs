//! lardon-daemon (under construction).
