//! `ArenaError`: why an allocation or reservation was refused (cold path).

use std::fmt;

use super::Domain;

/// Why an arena refused an allocation or a `MemoryBudget` refused a
/// reservation. A refused request changes no accounting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArenaError {
    /// The request would take the domain over its limit, or all domains
    /// together over the global limit. The byte counts are those observed
    /// when the request was refused; at least one of `live + requested >
    /// limit` and `global_live + requested > global_limit` holds.
    #[error(
        "the {domain} domain cannot reserve {requested} bytes: {live} of {} bytes live in the domain, {global_live} of {} bytes live in all domains",
        shown(.limit),
        shown(.global_limit)
    )]
    OverBudget {
        /// The domain asked.
        domain: Domain,
        /// The bytes asked for (for a grow, the additional bytes).
        requested: usize,
        /// Bytes live in `domain` at the time.
        live: usize,
        /// The domain's limit (`usize::MAX`: unlimited).
        limit: usize,
        /// Bytes live in all domains at the time.
        global_live: usize,
        /// The global limit (`usize::MAX`: unlimited).
        global_limit: usize,
    },
    /// The accounting admitted the request but the memory could not be
    /// obtained (the system allocator failed).
    #[error("the {domain} domain could not obtain {requested} bytes")]
    AllocationFailed {
        /// The domain asked.
        domain: Domain,
        /// The bytes asked for.
        requested: usize,
    },
    /// A request sized by a model, an input or a flag is above a ceiling
    /// that no budget raises (the process's allocation ceiling,
    /// `arena::Ceiling`, or another limit in [`crate::limits`]);
    /// nothing was allocated.
    #[error(
        "{what} needs {requested} bytes, above the ceiling of {limit} bytes for the {domain} domain"
    )]
    AboveCeiling {
        /// The domain the bytes were for.
        domain: Domain,
        /// What asked (a node, an input, a lowering), for the message.
        what: String,
        /// The bytes asked for (`usize::MAX` when the size overflows).
        requested: usize,
        /// The ceiling.
        limit: usize,
    },
    /// A request sized by a model, an input or a flag fits under the
    /// process's allocation ceiling (`arena::Ceiling`) but other
    /// requests of the process hold too much of it now; nothing was
    /// allocated.
    #[error(
        "{what} needs {requested} bytes for the {domain} domain, but {live} of the {limit}-byte allocation ceiling are held by other requests"
    )]
    CeilingHeld {
        /// The domain the bytes were for.
        domain: Domain,
        /// What asked, for the message.
        what: String,
        /// The bytes asked for.
        requested: usize,
        /// Bytes of the ceiling held at the time.
        live: usize,
        /// The ceiling.
        limit: usize,
    },
    /// `len` elements of `element_bytes` bytes each do not fit in `usize`.
    #[error("the {domain} domain cannot hold {len} elements of {element_bytes} bytes")]
    TooLarge {
        /// The domain asked.
        domain: Domain,
        /// The element count asked for.
        len: usize,
        /// The size of one element.
        element_bytes: usize,
    },
}

impl ArenaError {
    /// The domain the refused request was for.
    pub fn domain(&self) -> Domain {
        match self {
            ArenaError::OverBudget { domain, .. }
            | ArenaError::AllocationFailed { domain, .. }
            | ArenaError::AboveCeiling { domain, .. }
            | ArenaError::CeilingHeld { domain, .. }
            | ArenaError::TooLarge { domain, .. } => *domain,
        }
    }

    /// Whether a limit refused the request (as opposed to the allocator):
    /// the request may succeed once other holders return bytes.
    pub fn is_over_budget(&self) -> bool {
        matches!(self, ArenaError::OverBudget { .. })
    }
}

/// A byte limit for messages: `usize::MAX` reads "unlimited".
fn shown(limit: &usize) -> ShownLimit {
    ShownLimit(*limit)
}

struct ShownLimit(usize);

impl fmt::Display for ShownLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == usize::MAX {
            f.write_str("unlimited")
        } else {
            write!(f, "{}", self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_limits() {
        let error = ArenaError::OverBudget {
            domain: Domain::Prepared,
            requested: 10,
            live: 95,
            limit: 100,
            global_live: 95,
            global_limit: usize::MAX,
        };
        assert_eq!(
            error.to_string(),
            "the prepared domain cannot reserve 10 bytes: 95 of 100 bytes live in the domain, \
             95 of unlimited bytes live in all domains"
        );
        assert!(error.is_over_budget());
        assert_eq!(error.domain(), Domain::Prepared);
    }
}
