//! Every capacity and threshold of the runtime, in one place (cold path).

/// Largest `.onnx` file [`crate::model::Model::open`] accepts: protobuf
/// messages are limited to 2 GiB, and large weights belong in external data.
pub const MAX_MODEL_FILE_BYTES: u64 = (1 << 31) - 1;

/// Alignment of each tensor in an external data file written by this project
/// (fixtures and, later, the prepared cache).
pub const EXTERNAL_DATA_ALIGNMENT: u64 = 64;

/// Embedded initializers up to this size are decoded at resolution and used
/// as inline constants; larger ones become prepared requirements like
/// external weights.
pub const MAX_INLINE_CONSTANT_BYTES: u64 = 64 * 1024;

/// Most tasks one scheduler [`crate::scheduler::TaskGraph`] may hold: the
/// task state word keeps the remaining-dependency count in 28 bits, and each
/// ready queue is sized to the graph (every task fires at most once).
pub const MAX_SCHEDULER_TASKS: usize = 1 << 24;

/// Default capacity of each scheduler ready queue (one per resource class ×
/// priority) when it is not sized to a graph.
#[cfg(not(loom))]
pub const SCHEDULER_QUEUE_CAPACITY: usize = 4096;
/// Default capacity of each scheduler ready queue (loom-sized).
#[cfg(loom)]
pub const SCHEDULER_QUEUE_CAPACITY: usize = 4;

/// Empty polls an idle scheduler worker spins through before it parks on its
/// futex word. Each poll is a handful of `ArrayQueue` loads (~tens of ns), so
/// this is a few tens of µs: above the 5–13 µs cost of waking a parked core.
#[cfg(not(loom))]
pub const SCHEDULER_SPIN_POLLS: u32 = 1 << 10;
/// Empty polls before parking (loom-sized).
#[cfg(loom)]
pub const SCHEDULER_SPIN_POLLS: u32 = 1;

/// Empty polls a CPU worker spins through after helping a kernel's parallel
/// region: regions come in bursts (one per kernel of a step), so it waits
/// longer for the next one before it parks.
#[cfg(not(loom))]
pub const SCHEDULER_JOB_SPIN_POLLS: u32 = 1 << 13;
/// Empty polls after a kernel region (loom-sized).
#[cfg(loom)]
pub const SCHEDULER_JOB_SPIN_POLLS: u32 = 1;

/// Fired tasks a worker keeps for itself before it shares them through the
/// ready queues (its buffer is allocated once, at start-up).
#[cfg(not(loom))]
pub const SCHEDULER_LOCAL_CAPACITY: usize = 1024;
/// Fired tasks a worker keeps (loom-sized).
#[cfg(loom)]
pub const SCHEDULER_LOCAL_CAPACITY: usize = 4;

/// Percent of every byte limit (global and per domain) that scheduler
/// admission keeps for critical tasks: prefetch and background work may hold
/// at most the rest, so an inference that needs memory can always start.
pub const SCHEDULER_CRITICAL_RESERVE_PERCENT: usize = 25;
