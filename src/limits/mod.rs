//! Every capacity and threshold of the runtime, in one place (cold path).

mod memory;

pub use memory::{MemoryLimits, SystemRoots};

/// Largest `.onnx` file [`crate::model::Model::open`] accepts: protobuf
/// messages are limited to 2 GiB, and large weights belong in external data.
pub const MAX_MODEL_FILE_BYTES: u64 = (1 << 31) - 1;

/// Most nodes a model may hold across its graphs and functions (real
/// decoders have tens of thousands); counted on the wire bytes before the
/// model is decoded.
pub const MAX_GRAPH_NODES: u64 = 1 << 20;

/// Alignment of each tensor in an external data file written by this project
/// (fixtures and, later, the prepared cache).
pub const EXTERNAL_DATA_ALIGNMENT: u64 = 64;

/// Embedded initializers up to this size are decoded at resolution and used
/// as inline constants; larger ones become prepared requirements like
/// external weights.
pub const MAX_INLINE_CONSTANT_BYTES: u64 = 64 * 1024;

/// Most tasks one scheduler `TaskGraph` may hold: the
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

/// Bytes from which a table that only row gathers read (an embedding) is
/// served row by row from its source when
/// [`SessionOptions::with_resident_tables`](crate::session::SessionOptions::with_resident_tables)
/// is on and the source does not offer it in place.
pub const ROW_TABLE_MIN_BYTES: u64 = 1 << 20;

/// Bytes a table served row by row is read in when it is verified (its
/// digest checked or recorded): the check holds one piece, never the table.
pub const ROW_TABLE_CHECK_PIECE_BYTES: usize = 64 << 10;

/// Bytes of sources a packing that takes rows reads per piece (whole
/// rows, at least one tile of them): preparation holds one piece per
/// packing instead of the sources whole.
pub const PACK_PIECE_BYTES: usize = 256 << 10;

/// Bytes of sources from which a packing that takes rows reads them itself,
/// in pieces of [`PACK_PIECE_BYTES`], instead of through read tasks that
/// run ahead of it (which hold every source they read until its packing
/// ran).
pub const PACK_IN_PIECES_MIN_BYTES: u64 = 128 << 10;

/// Physical memory assumed where the system does not report it (non-Linux
/// systems, or `/proc/meminfo` unreadable).
pub const FALLBACK_PHYSICAL_MEMORY_BYTES: u64 = 8 << 30;

/// The ceiling on the bytes that allocations sized by a model, an input or
/// a flag may hold together, in the whole process: half of the least of
/// the machine's physical memory (`MemTotal` in `/proc/meminfo`, else
/// [`FALLBACK_PHYSICAL_MEMORY_BYTES`]), the memory limit of the process's
/// cgroup (v2 `memory.max`, v1 `memory.limit_in_bytes`) and its
/// address-space limit (`RLIMIT_AS`); see [`MemoryLimits`].
///
/// This reads the system each call. The runtime reads it once, into the
/// process-wide budget that concurrent requests charge and release
/// (`arena::Ceiling::process`): a lowering's activation buffers and
/// folded values, the generated or decoded inputs of a call, each
/// preparation buffer. Each is charged before anything is allocated, so a
/// request the allocator could not serve is a typed error instead of an
/// abort (or of the kernel's out-of-memory killer).
pub fn default_allocation_ceiling() -> usize {
    MemoryLimits::of_this_process().ceiling()
}

/// Most bytes the values folded while resolving a model (nodes whose inputs
/// are all constants: `Constant`, `ConstantOfShape`, arithmetic on
/// initializers) may hold together, and never more than
/// [`default_allocation_ceiling`]: folded values are small constants, not
/// activations.
pub const MAX_RESOLUTION_FOLD_BYTES: usize = 1 << 30;

/// Most bytes one array of an `.npz` input may decompress to, and all its
/// arrays together (a deflate bomb stops here); never more than
/// [`default_allocation_ceiling`].
pub const MAX_NPZ_BYTES: u64 = 1 << 34;

/// Most bytes of an `.npy` header NumPy itself reads (its
/// `max_header_size` default); longer headers are refused.
pub const MAX_NPY_HEADER_BYTES: usize = 10_000;

/// Most threads one scheduler worker pool may start (CPU, I/O and device
/// workers together); more is refused before any thread starts.
pub const MAX_WORKER_THREADS: usize = 4096;

/// Most threads the command line's `--threads` accepts.
pub const MAX_CLI_THREADS: usize = 1024;

/// Most repetitions `onnx-prepared run --repeat` accepts.
pub const MAX_REPEAT: usize = 1_000_000;

/// Most new tokens `onnx-prepared generate --max-new-tokens` accepts (far
/// beyond any context window these models have; each token is one run).
pub const MAX_NEW_TOKENS: usize = 65_536;
