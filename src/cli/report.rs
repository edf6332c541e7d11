//! Measurements of how a first inference starts (cold path): the four
//! [`BenchMode`]s, each measured on a traced [`RuntimeSession`] from its
//! trace, its budget's high-water marks and its payload source's counters,
//! and the [`BenchReport`] that `onnx-prepared bench` and `demo` print
//! (a table, or JSON).
//!
//! Every quantity is read from what the session recorded, never estimated:
//!
//! * *time to first runnable node*: from the first call of the mode to the
//!   start of the measured run's first inference event;
//! * *time to first output*: to when the run's `wait` returned;
//! * *time of all session tasks*: to the end of the last read or prepack
//!   event of the mode (0 for [`BenchMode::Hot`], prepared before);
//! * *bytes read*: the source's counters across the mode;
//! * *prepacks*: prepack events during the mode;
//! * *peak live bytes*: the budget's per-domain high-water marks (reset to
//!   the live bytes when the hot run starts);
//! * *max bytes in flight*: the most weight bytes of read events running at
//!   once (each read event counts its weight's full byte length).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use onnx_prepared::model::{
    FileSource, MmapSource, Model, PayloadSource, ResolveOptions, ResolvedModel,
};
use onnx_prepared::plan::{PreparedExecutionPlan, TaskKind, TaskScope};
use onnx_prepared::session::{
    RuntimeContext, RuntimeSession, SessionOptions, Trace, TraceEvent, TraceLane,
};
use onnx_prepared::{Domain, Error, PreparedCache, PreparedModelPolicy, RunError, Tensor};

/// How long a measurement waits for a streaming preparation's last tasks
/// after its run returned (they finish moments later; the wait ends early
/// only if a task never runs).
const SETTLE_LIMIT: Duration = Duration::from_secs(5);

/// One way of getting to the first output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BenchMode {
    /// `prepare()`, then one run: every weight read and prepacked first.
    Eager,
    /// `run_async` on a cold session with no preparation asked for: the
    /// run starts while the weights it needs later are still loading.
    Streaming,
    /// `prepare_async()` and `run_async` submitted together: the run
    /// overlaps the eager preparation.
    Prepared,
    /// A second run on a prepared session after a warm-up run.
    Hot,
    /// [`BenchMode::Streaming`] on a session whose plan reads a complete
    /// prepared cache (measured only when the options name a cache
    /// directory; the cache is completed first, unmeasured).
    Cached,
}

impl BenchMode {
    /// Every mode, in report order.
    pub const ALL: [BenchMode; 4] = [
        BenchMode::Eager,
        BenchMode::Streaming,
        BenchMode::Prepared,
        BenchMode::Hot,
    ];

    /// The mode's name in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            BenchMode::Eager => "eager",
            BenchMode::Streaming => "streaming",
            BenchMode::Prepared => "prepared",
            BenchMode::Hot => "hot",
            BenchMode::Cached => "cached",
        }
    }
}

/// What one mode measured (see the module docs for each quantity).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeReport {
    /// The mode.
    pub mode: BenchMode,
    /// From the first call to the start of the run's first inference event.
    pub time_to_first_runnable_node: Duration,
    /// From the first call to the return of the run's `wait`.
    pub time_to_first_output: Duration,
    /// From the first call to the end of the mode's last read or prepack.
    pub time_all_session_tasks: Duration,
    /// Payload bytes the source delivered during the mode.
    pub bytes_read: u64,
    /// Prepack events during the mode.
    pub prepacks: u64,
    /// Per domain, in [`Domain::ALL`] order: the most bytes live at once.
    pub peak_live_bytes: [u64; Domain::COUNT],
    /// The most weight bytes of concurrently running read events.
    pub max_bytes_in_flight: u64,
}

/// The modes measured on one model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BenchReport {
    /// In the order measured.
    pub modes: Vec<ModeReport>,
}

impl BenchReport {
    /// The report as JSON (a stable interface):
    /// `{"modes": [{"mode", "time_to_first_runnable_node_s",
    /// "time_to_first_output_s", "time_all_session_tasks_s", "bytes_read",
    /// "prepacks", "peak_live_bytes": {domain: bytes}, "max_bytes_in_flight"}]}`.
    pub fn to_json(&self) -> String {
        let mut out = String::from("{\"modes\": [");
        for (i, m) in self.modes.iter().enumerate() {
            let peaks = Domain::ALL
                .iter()
                .map(|d| format!("\"{}\": {}", d.name(), m.peak_live_bytes[d.index()]))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = write!(
                out,
                concat!(
                    "{sep}{{\"mode\": \"{mode}\", ",
                    "\"time_to_first_runnable_node_s\": {first_node:.6}, ",
                    "\"time_to_first_output_s\": {first_output:.6}, ",
                    "\"time_all_session_tasks_s\": {session_tasks:.6}, ",
                    "\"bytes_read\": {bytes_read}, \"prepacks\": {prepacks}, ",
                    "\"peak_live_bytes\": {{{peaks}}}, ",
                    "\"max_bytes_in_flight\": {in_flight}}}",
                ),
                sep = if i == 0 { "" } else { ", " },
                mode = m.mode.name(),
                first_node = m.time_to_first_runnable_node.as_secs_f64(),
                first_output = m.time_to_first_output.as_secs_f64(),
                session_tasks = m.time_all_session_tasks.as_secs_f64(),
                bytes_read = m.bytes_read,
                prepacks = m.prepacks,
                peaks = peaks,
                in_flight = m.max_bytes_in_flight,
            );
        }
        out.push_str("]}");
        out
    }

    /// The report as a text table, one row per mode.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = write!(
            out,
            "{:<10} {:>11} {:>13} {:>14} {:>11} {:>9}",
            "mode", "first node", "first output", "session tasks", "bytes read", "prepacks"
        );
        for d in Domain::ALL {
            let _ = write!(out, " {:>13}", format!("peak {}", short(d)));
        }
        let _ = writeln!(out, " {:>10}", "in flight");
        for m in &self.modes {
            let _ = write!(
                out,
                "{:<10} {:>11} {:>13} {:>14} {:>11} {:>9}",
                m.mode.name(),
                millis(m.time_to_first_runnable_node),
                millis(m.time_to_first_output),
                millis(m.time_all_session_tasks),
                human_bytes(m.bytes_read),
                m.prepacks,
            );
            for d in Domain::ALL {
                let _ = write!(out, " {:>13}", human_bytes(m.peak_live_bytes[d.index()]));
            }
            let _ = writeln!(out, " {:>10}", human_bytes(m.max_bytes_in_flight));
        }
        out
    }
}

fn short(d: Domain) -> &'static str {
    match d {
        Domain::Preparation => "prep",
        Domain::Prepared => "prepared",
        Domain::Execution => "exec",
        _ => d.name(),
    }
}

fn millis(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn human_bytes(bytes: u64) -> String {
    match bytes {
        0 => "0".to_owned(),
        1..10_000 => format!("{bytes} B"),
        10_000..1_000_000 => format!("{:.1} kB", bytes as f64 / 1e3),
        _ => format!("{:.2} MB", bytes as f64 / 1e6),
    }
}

/// Measures `mode` on `session` (which must trace, and for every mode but
/// [`BenchMode::Hot`] should be fresh) running `ctx`; `source` is the
/// session's payload source. Returns the report and the context with the
/// measured run's outputs.
///
/// # Errors
/// The session does not trace; preparation or the run failed.
pub fn measure(
    mode: BenchMode,
    session: &RuntimeSession,
    source: &dyn PayloadSource,
    ctx: RuntimeContext,
) -> Result<(ModeReport, RuntimeContext), Error> {
    let trace = session.trace().ok_or_else(|| RunError::Unsupported {
        what: "measuring a session that does not trace".to_owned(),
    })?;
    let ctx = if mode == BenchMode::Hot {
        warm_up(session, ctx)?
    } else {
        ctx
    };
    let bytes_before = source.counters().total();
    let t0 = Instant::now();
    let (ctx, output) = first_output(mode, session, ctx)?;
    let start = t0.saturating_duration_since(trace.origin());
    if mode != BenchMode::Hot {
        settle(session, trace, start);
    }
    let events: Vec<TraceEvent> = trace
        .events()
        .into_iter()
        .filter(|e| e.start >= start)
        .collect();
    let events = ModeEvents::new(session.plan(), &events, start);
    let report = ModeReport {
        mode,
        time_to_first_runnable_node: events.first_runnable_node(),
        time_to_first_output: output.saturating_duration_since(t0),
        time_all_session_tasks: if mode == BenchMode::Hot {
            Duration::ZERO
        } else {
            events.session_tasks_end()
        },
        bytes_read: source.counters().total().saturating_sub(bytes_before),
        prepacks: events.prepacks(),
        peak_live_bytes: peak_live_bytes(session),
        max_bytes_in_flight: max_in_flight(&events.read_spans()),
    };
    Ok((report, ctx))
}

/// [`BenchMode::Hot`]'s unmeasured part: preparation and a warm-up run,
/// then the memory peaks lowered to the bytes live, so that the report
/// shows the hot run's.
fn warm_up(session: &RuntimeSession, ctx: RuntimeContext) -> Result<RuntimeContext, Error> {
    session.prepare().map_err(|e| e.error)?;
    let ctx = session.run(ctx).map_err(|e| e.error)?;
    session.reset_memory_peaks();
    Ok(ctx)
}

/// The measured part of `mode`: its calls up to the run's output. Returns
/// the context with the outputs and when the run's `wait` returned (the
/// prepared mode waits for its preparation after that).
fn first_output(
    mode: BenchMode,
    session: &RuntimeSession,
    ctx: RuntimeContext,
) -> Result<(RuntimeContext, Instant), Error> {
    Ok(match mode {
        BenchMode::Eager => {
            session.prepare().map_err(|e| e.error)?;
            let ctx = session.run(ctx).map_err(|e| e.error)?;
            (ctx, Instant::now())
        }
        BenchMode::Streaming | BenchMode::Hot | BenchMode::Cached => {
            let ctx = session.run_async(ctx).wait().map_err(|e| e.error)?;
            (ctx, Instant::now())
        }
        BenchMode::Prepared => {
            let preparation = session.prepare_async();
            let run = session.run_async(ctx);
            let ctx = run.wait().map_err(|e| e.error)?;
            let output = Instant::now();
            preparation.wait().map_err(|e| e.error)?;
            (ctx, output)
        }
    })
}

/// Per domain, in [`Domain::ALL`] order, the session's peak live bytes.
fn peak_live_bytes(session: &RuntimeSession) -> [u64; Domain::COUNT] {
    let memory = session.memory();
    Domain::ALL.map(|d| memory.domain(d).peak as u64)
}

/// The trace events of one measured mode (those since `start`, the
/// mode's first call), named by the plan's tasks.
struct ModeEvents<'a> {
    plan: &'a PreparedExecutionPlan,
    events: &'a [TraceEvent],
    start: Duration,
    /// Task index by task name.
    by_name: HashMap<&'a str, usize>,
}

impl<'a> ModeEvents<'a> {
    fn new(plan: &'a PreparedExecutionPlan, events: &'a [TraceEvent], start: Duration) -> Self {
        let by_name = plan
            .tasks()
            .name
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i))
            .collect();
        Self {
            plan,
            events,
            start,
            by_name,
        }
    }

    /// `d`, a time since the trace's origin, from the mode's start.
    fn since(&self, d: Duration) -> Duration {
        d.saturating_sub(self.start)
    }

    /// The start of the first inference event.
    fn first_runnable_node(&self) -> Duration {
        self.events
            .iter()
            .filter(|e| e.lane == TraceLane::Inference)
            .map(|e| e.start)
            .min()
            .map_or(Duration::ZERO, |d| self.since(d))
    }

    /// The end of the last read or prepack event.
    fn session_tasks_end(&self) -> Duration {
        self.events
            .iter()
            .filter(|e| e.lane != TraceLane::Inference)
            .map(|e| e.end)
            .max()
            .map_or(Duration::ZERO, |d| self.since(d))
    }

    /// Events of the plan's prepack tasks.
    fn prepacks(&self) -> u64 {
        let kind = &self.plan.tasks().kind;
        self.events
            .iter()
            .filter(|e| {
                e.lane == TraceLane::Prepack
                    && self
                        .by_name
                        .get(e.name.as_str())
                        .is_some_and(|&t| kind[t] == TaskKind::Prepack)
            })
            .count() as u64
    }

    /// Each read event's `(start, end, bytes)`, its bytes the full length
    /// of the weight its task reads.
    fn read_spans(&self) -> Vec<(Duration, Duration, u64)> {
        let reads = &self.plan.tasks().reads;
        let weights = self.plan.resolved().model().weights();
        let read_bytes = |e: &TraceEvent| {
            self.by_name
                .get(e.name.as_str())
                .and_then(|&t| reads[t])
                .map_or(0, |w| weights[w.index()].byte_len())
        };
        self.events
            .iter()
            .filter(|e| e.lane == TraceLane::Io)
            .map(|e| (e.start, e.end, read_bytes(e)))
            .collect()
    }
}

/// Waits until every session task of the plan has a trace event since
/// `start` (a streaming preparation's last tasks record a moment after the
/// run they fed returned), or [`SETTLE_LIMIT`] passed.
fn settle(session: &RuntimeSession, trace: &Trace, start: Duration) {
    let tasks = session.plan().tasks();
    let expected = tasks
        .scope
        .iter()
        .filter(|s| **s == TaskScope::Session)
        .count();
    let deadline = Instant::now() + SETTLE_LIMIT;
    loop {
        let recorded = trace
            .events()
            .iter()
            .filter(|e| e.lane != TraceLane::Inference && e.start >= start)
            .count();
        if recorded >= expected || Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The largest sum of `bytes` over spans `(start, end, bytes)` open at one
/// instant (a span ending when another starts does not overlap it).
pub fn max_in_flight(spans: &[(Duration, Duration, u64)]) -> u64 {
    let mut edges: Vec<(Duration, bool, u64)> = spans
        .iter()
        .flat_map(|&(start, end, bytes)| [(start, true, bytes), (end, false, bytes)])
        .collect();
    // Ends (`false`) sort before starts at the same instant.
    edges.sort_by_key(|&(at, opens, _)| (at, opens));
    let (mut now, mut max) = (0u64, 0u64);
    for (_, opens, bytes) in edges {
        if opens {
            now += bytes;
            max = max.max(now);
        } else {
            now = now.saturating_sub(bytes);
        }
    }
    max
}

/// The four modes on one model, each in a fresh session.
#[derive(Debug)]
pub struct BenchRun {
    /// One row per mode, in [`BenchMode::ALL`] order (then
    /// [`BenchMode::Cached`] with a cache directory).
    pub report: BenchReport,
    /// The streaming mode's trace.
    pub streaming_trace: Arc<Trace>,
    /// The hot mode's session (every object resident) and its context,
    /// holding the hot run's outputs.
    pub hot: (RuntimeSession, RuntimeContext),
}

/// Runs every [`BenchMode`] on `model` with `inputs`, each in a fresh
/// traced session (fresh store and budget; the OS page cache is whatever
/// earlier reads left). The sessions share one worker pool, started before
/// the first measurement (`options.pool()`, or one made from `options`).
///
/// # Errors
/// The model cannot be resolved or planned, or a mode failed.
pub fn run_modes(
    model: &Model,
    resolve: &ResolveOptions,
    options: &SessionOptions,
    inputs: &[(String, Tensor)],
) -> Result<BenchRun, Error> {
    let options = options
        .clone()
        .with_pool(options.worker_pool()?)
        .with_trace(true)
        // Each mode loads on its own.
        .with_share_prepared(false);
    let cache = options.cache_dir().map(Path::to_owned);
    if let Some(dir) = &cache {
        complete_cache(dir, model, resolve, &options)?;
    }
    let mut report = BenchReport::default();
    let mut streaming_trace = None;
    let mut hot = None;
    let modes = BenchMode::ALL
        .into_iter()
        .chain(cache.is_some().then_some(BenchMode::Cached));
    for mode in modes {
        let plan = mode_plan(mode, model, resolve, cache.as_deref())?;
        let (row, session, ctx) = measure_fresh(mode, plan, model, &options, inputs)?;
        report.modes.push(row);
        match mode {
            BenchMode::Streaming => streaming_trace = session.trace().cloned(),
            BenchMode::Hot => hot = Some((session, ctx)),
            _ => {}
        }
    }
    Ok(BenchRun {
        report,
        streaming_trace: streaming_trace.expect("the streaming session traces"),
        hot: hot.expect("the hot mode ran"),
    })
}

/// Builds what the prepared cache in `dir` is missing (unmeasured), for
/// [`BenchMode::Cached`] to measure a complete cache.
fn complete_cache(
    dir: &Path,
    model: &Model,
    resolve: &ResolveOptions,
    options: &SessionOptions,
) -> Result<(), Error> {
    let store = PreparedCache::open(dir, PreparedModelPolicy::BuildIfMissing, model, resolve.cpu)?;
    let plan = PreparedExecutionPlan::build_cached(
        ResolvedModel::resolve(model.clone(), resolve)?,
        store,
    )?;
    let session = RuntimeSession::new(plan, options.clone())?;
    session.prepare().map_err(|e| e.error)?;
    session.flush_cache();
    Ok(())
}

/// `mode`'s plan of `model`: reading the complete cache in `cache` for
/// [`BenchMode::Cached`], without a cache for the others.
fn mode_plan(
    mode: BenchMode,
    model: &Model,
    resolve: &ResolveOptions,
    cache: Option<&Path>,
) -> Result<PreparedExecutionPlan, Error> {
    let resolved = ResolvedModel::resolve(model.clone(), resolve)?;
    Ok(match (cache, mode) {
        (Some(dir), BenchMode::Cached) => PreparedExecutionPlan::build_cached(
            resolved,
            PreparedCache::open(
                dir,
                PreparedModelPolicy::RequireComplete,
                model,
                resolve.cpu,
            )?,
        )?,
        _ => PreparedExecutionPlan::build(resolved)?,
    })
}

/// Measures `mode` in a fresh session over `plan` running `inputs`;
/// returns the report, the session and its context.
fn measure_fresh(
    mode: BenchMode,
    plan: PreparedExecutionPlan,
    model: &Model,
    options: &SessionOptions,
    inputs: &[(String, Tensor)],
) -> Result<(ModeReport, RuntimeSession, RuntimeContext), Error> {
    let source = open_source(model, options)?;
    let session = RuntimeSession::with_source(plan, source.clone(), options.clone())?;
    let mut ctx = RuntimeContext::new(&session);
    for (name, value) in inputs {
        ctx.set_input(name, value.clone())?;
    }
    let (row, ctx) = measure(mode, &session, &*source, ctx)?;
    Ok((row, session, ctx))
}

/// The payload source a session over `model` reads through, as
/// [`RuntimeSession::new`] opens it: mapped under
/// [`SessionOptions::map_weights`], else read.
fn open_source(model: &Model, options: &SessionOptions) -> Result<Arc<dyn PayloadSource>, Error> {
    Ok(if options.map_weights() {
        Arc::new(MmapSource::open(model)?)
    } else {
        Arc::new(FileSource::open(model)?)
    })
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn in_flight_sums_overlapping_spans_only() {
        assert_eq!(max_in_flight(&[]), 0);
        // 0..4 (10), 1..3 (20), 3..5 (5): 30 at 1..3; the third starts as
        // the second ends.
        let spans = [(ms(0), ms(4), 10), (ms(1), ms(3), 20), (ms(3), ms(5), 5)];
        assert_eq!(max_in_flight(&spans), 30);
        let apart = [(ms(0), ms(1), 7), (ms(1), ms(2), 9)];
        assert_eq!(max_in_flight(&apart), 9);
    }

    #[test]
    fn json_names_every_mode_and_domain() {
        let report = BenchReport {
            modes: BenchMode::ALL
                .iter()
                .map(|&mode| ModeReport {
                    mode,
                    time_to_first_runnable_node: ms(1),
                    time_to_first_output: ms(2),
                    time_all_session_tasks: ms(3),
                    bytes_read: 4,
                    prepacks: 5,
                    peak_live_bytes: [6, 7, 8, 9],
                    max_bytes_in_flight: 10,
                })
                .collect(),
        };
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        let modes = json["modes"].as_array().unwrap();
        assert_eq!(modes.len(), 4);
        assert_eq!(modes[1]["mode"], "streaming");
        assert_eq!(modes[0]["time_to_first_output_s"], 0.002);
        assert_eq!(modes[3]["peak_live_bytes"]["execution"], 8);
        assert_eq!(modes[3]["max_bytes_in_flight"], 10);
        assert_eq!(report.table().lines().count(), 5);
    }
}
