//! `Domain`: the allocation domains every charged byte belongs to (see the
//! table in the [`crate::arena`] module docs).

use std::fmt;

/// An allocation domain: who owns the bytes and when they are returned
/// (each variant says which).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Domain {
    /// Source buffers and scratch of read, prepack, hash and persist tasks.
    Preparation,
    /// Resident prepared (packed) objects.
    Prepared,
    /// Invocation-local intermediates and kernel workspaces.
    Execution,
    /// Outputs leased to the caller and staged inputs.
    Io,
}

impl Domain {
    /// How many domains there are.
    pub const COUNT: usize = 4;

    /// Every domain, in [`Domain::index`] order.
    pub const ALL: [Domain; Domain::COUNT] = [
        Domain::Preparation,
        Domain::Prepared,
        Domain::Execution,
        Domain::Io,
    ];

    /// This domain's position in [`Domain::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The lower-case name used in messages and reports.
    pub const fn name(self) -> &'static str {
        match self {
            Domain::Preparation => "preparation",
            Domain::Prepared => "prepared",
            Domain::Execution => "execution",
            Domain::Io => "io",
        }
    }
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
