//! [`FaultInjectingSource`]: a payload source wrapping another that delays,
//! fails, shortens or holds reads of chosen weights — the test double for
//! fault injection (reads that are slow, fail or come up short on purpose).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::payload::{PayloadSource, ReadCounters};
use super::{PayloadError, WeightDescriptor, WeightId};
use crate::sync::Latch;

/// A fault to inject into reads of one weight. Several faults on one weight
/// apply in the order gate, delay, then failure.
#[derive(Debug, Clone)]
pub enum ReadFault {
    /// Sleep this long before reading.
    Delay(Duration),
    /// Block until the test opens the latch.
    Gate(Arc<Latch>),
    /// Fail with [`PayloadError::Injected`] without delivering bytes.
    Fail,
    /// Deliver only the first `bytes` bytes, then fail with
    /// [`PayloadError::ShortRead`].
    ShortRead {
        /// Bytes delivered before the failure.
        bytes: u64,
    },
}

/// Wraps a source and injects faults into reads of chosen weights.
#[derive(Debug)]
pub struct FaultInjectingSource<S> {
    inner: S,
    faults: HashMap<WeightId, Vec<ReadFault>>,
    started: ReadCounters,
    counters: ReadCounters,
}

impl<S: PayloadSource> FaultInjectingSource<S> {
    /// Wraps `inner` with no faults; `weights` is the model's weight count.
    pub fn new(inner: S, weights: usize) -> Self {
        Self {
            inner,
            faults: HashMap::new(),
            started: ReadCounters::new(weights),
            counters: ReadCounters::new(weights),
        }
    }

    /// Adds a fault to every read of weight `id`.
    pub fn with_fault(mut self, id: WeightId, fault: ReadFault) -> Self {
        self.faults.entry(id).or_default().push(fault);
        self
    }

    /// How many reads of `id` have started (including ones held at a gate).
    pub fn reads_started(&self, id: WeightId) -> u64 {
        self.started.bytes_read(id)
    }

    /// The wrapped source.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: PayloadSource> PayloadSource for FaultInjectingSource<S> {
    fn descriptor(&self, id: WeightId) -> Option<&WeightDescriptor> {
        self.inner.descriptor(id)
    }

    fn read(&self, id: WeightId, buf: &mut [u8]) -> Result<(), PayloadError> {
        self.started.add(id, 1);
        let faults = self.faults.get(&id).map(Vec::as_slice).unwrap_or_default();
        for fault in faults {
            if let ReadFault::Gate(latch) = fault {
                latch.wait();
            }
        }
        for fault in faults {
            if let ReadFault::Delay(d) = fault {
                crate::sync::thread::sleep(*d);
            }
        }
        let name = || {
            self.inner
                .descriptor(id)
                .map(|w| w.name().to_owned())
                .unwrap_or_default()
        };
        if faults.iter().any(|f| matches!(f, ReadFault::Fail)) {
            return Err(PayloadError::Injected { tensor: name() });
        }
        self.inner.read(id, buf)?;
        if let Some(bytes) = faults.iter().find_map(|f| match f {
            ReadFault::ShortRead { bytes } => Some((*bytes).min(buf.len() as u64)),
            _ => None,
        }) {
            buf[bytes as usize..].fill(0);
            self.counters.add(id, bytes);
            return Err(PayloadError::ShortRead {
                tensor: name(),
                path: PathBuf::from("(fault injection)"),
                read: bytes,
                expected: buf.len() as u64,
            });
        }
        self.counters.add(id, buf.len() as u64);
        Ok(())
    }

    fn check_unchanged(&self, id: WeightId) -> Result<(), PayloadError> {
        self.inner.check_unchanged(id)
    }

    fn counters(&self) -> &ReadCounters {
        &self.counters
    }
}
