//! Allocation domains and their budgets.
