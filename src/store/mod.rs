//! Prepared-object residency (see the module docs once implemented).
