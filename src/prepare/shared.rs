//! One prepared store per process: every object a session publishes is
//! also registered here under its [`SharedKey`], weakly, so another
//! session of the same model (or of a model with a weight of the same
//! lineage) publishes the same object instead of reading and packing it
//! again, at no extra memory: the bytes stay charged to the session that
//! built them, and are freed when the last session holding them lets go.
//!
//! Keys: a [`PreparedKey`] identifies an object by its sources' names,
//! types, dims and digests. A source without a digest is identified by
//! its data file's location, range and size, which only name the same
//! bytes within one model folder: such keys also carry the data files'
//! identities (`FileIdentity`: device, inode, size, modification and
//! status-change times, from the handle the model opened).

use std::sync::Arc;

use crate::arena::PreparedAllocation;
use crate::model::{Model, PreparedKey, Requirement, WeightSource};

use super::object::PreparedObject;

/// An object shared by the sessions that publish it, with the charge of
/// its bytes (returned when the last holder drops it).
#[derive(Debug)]
pub struct SharedObject {
    /// The object.
    pub object: PreparedObject,
    _allocation: PreparedAllocation,
}

impl SharedObject {
    /// `object`, charged by `allocation`.
    pub(crate) fn new(object: PreparedObject, allocation: PreparedAllocation) -> Arc<Self> {
        Arc::new(Self {
            object,
            _allocation: allocation,
        })
    }
}

/// The identity of an object across sessions.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SharedKey {
    key: PreparedKey,
    /// Data file identities, when a source has no digest.
    files: Option<String>,
}

impl SharedKey {
    /// `r`'s key in `model`.
    pub(crate) fn new(model: &Model, r: &Requirement) -> Self {
        let mut files = Vec::new();
        for &w in &r.sources {
            let d = &model.weights()[w.index()];
            if d.checksum().and_then(|c| c.tensor_sha256()).is_some() {
                continue;
            }
            if let WeightSource::External { file, .. } = d.source() {
                // The file as opened: the same identity (device, inode,
                // size, modification and status-change times) means the
                // same bytes; a file written or touched since is another.
                let f = &model.external_files()[file.index()];
                files.push(f.identity().key());
            }
        }
        Self {
            key: r.key.clone(),
            files: (!files.is_empty()).then(|| files.join("\n")),
        }
    }
}

/// The process's registry (no loom model runs sessions: under loom there is
/// none, and nothing is shared).
#[cfg(not(loom))]
mod registry {
    use std::collections::HashMap;
    use std::sync::{Arc, OnceLock, Weak};

    use super::{SharedKey, SharedObject};
    use crate::sync::Lock;

    fn registry() -> &'static Lock<HashMap<SharedKey, Weak<SharedObject>>> {
        static REGISTRY: OnceLock<Lock<HashMap<SharedKey, Weak<SharedObject>>>> = OnceLock::new();
        REGISTRY.get_or_init(|| Lock::new(HashMap::new()))
    }

    pub(in crate::prepare) fn find(key: &SharedKey) -> Option<Arc<SharedObject>> {
        registry().with(|r| r.get(key).and_then(Weak::upgrade))
    }

    pub(in crate::prepare) fn register(key: SharedKey, object: &Arc<SharedObject>) {
        registry().with(|r| {
            // Entries whose objects died go when the map doubles.
            if r.len() >= 64 && r.len().is_power_of_two() {
                r.retain(|_, w| w.strong_count() > 0);
            }
            r.insert(key, Arc::downgrade(object));
        });
    }
}

#[cfg(loom)]
mod registry {
    use std::sync::Arc;

    use super::{SharedKey, SharedObject};

    pub(in crate::prepare) fn find(_: &SharedKey) -> Option<Arc<SharedObject>> {
        None
    }

    pub(in crate::prepare) fn register(_: SharedKey, _: &Arc<SharedObject>) {}
}

/// The object another session published under `key`, if it is alive.
pub(crate) fn find(key: &SharedKey) -> Option<Arc<SharedObject>> {
    registry::find(key)
}

/// Registers `object` under `key`.
pub(crate) fn register(key: SharedKey, object: &Arc<SharedObject>) {
    registry::register(key, object);
}
