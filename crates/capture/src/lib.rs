//! The LD_PRELOAD capture library (issue: transparent capture). Not built
//! out yet: this crate currently exports no interposed symbol, so preloading
//! it changes nothing.
