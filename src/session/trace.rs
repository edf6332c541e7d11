//! `Trace`: what a traced session did and when — reads, prepacks, inference
//! steps — for the demo's timeline, the `bench` measurements and Chrome
//! trace-event JSON (opens in Perfetto). Cold path: recording takes a lock
//! per event and is off unless [`SessionOptions::trace`] asks for it.
//!
//! [`SessionOptions::trace`]: super::SessionOptions::trace

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::arena::Domain;
use crate::sync::Lock;

/// Which lane of the timeline an event belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceLane {
    /// A read task (I/O worker).
    Io,
    /// A prepack task (CPU worker).
    Prepack,
    /// An inference step, or a whole hot run.
    Inference,
}

impl TraceLane {
    /// Every lane, in timeline order.
    pub const ALL: [TraceLane; 3] = [TraceLane::Io, TraceLane::Prepack, TraceLane::Inference];

    /// The lane's name.
    pub fn name(self) -> &'static str {
        match self {
            TraceLane::Io => "io",
            TraceLane::Prepack => "prepack",
            TraceLane::Inference => "inference",
        }
    }
}

/// One traced span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    /// Its lane.
    pub lane: TraceLane,
    /// The plan task or step it ran.
    pub name: String,
    /// Start, since the trace's origin.
    pub start: Duration,
    /// End, since the trace's origin.
    pub end: Duration,
    /// Which run it belongs to (inference events; 0 for preparation).
    pub run: u64,
    /// For an inference step of a cold run: the session's memory and
    /// residency counters as the step ended.
    pub memory: Option<StepMemory>,
}

/// Live bytes per memory domain (indexed by [`Domain::index`]) and the
/// session's eviction and restore counts, read as an inference step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepMemory {
    /// Live bytes per domain.
    pub live: [usize; Domain::COUNT],
    /// Objects evicted so far.
    pub evictions: u64,
    /// Objects restored so far.
    pub restores: u64,
}

/// A session's recorded events.
#[derive(Debug)]
pub struct Trace {
    origin: Instant,
    events: Lock<Vec<TraceEvent>>,
}

impl Default for Trace {
    fn default() -> Self {
        Self::new()
    }
}

impl Trace {
    /// An empty trace starting now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
            events: Lock::new(Vec::new()),
        }
    }

    /// The instant event times count from.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// Records a span that ran from `start` to `end`.
    pub fn record(&self, lane: TraceLane, name: &str, start: Instant, end: Instant, run: u64) {
        self.record_with(lane, name, (start, end), run, None);
    }

    /// Records a span with the memory as it ended (inference steps).
    pub fn record_with(
        &self,
        lane: TraceLane,
        name: &str,
        (start, end): (Instant, Instant),
        run: u64,
        memory: Option<StepMemory>,
    ) {
        let event = TraceEvent {
            lane,
            name: name.to_owned(),
            start: start.saturating_duration_since(self.origin),
            end: end.saturating_duration_since(self.origin),
            run,
            memory,
        };
        self.events.with(|e| e.push(event));
    }

    /// The arena table of `docs/design.md` ("Residency and memory limits") for run `run` (its cold steps, in order):
    /// per step, the plan work (the step's scope), live bytes per arena as
    /// it ended, and what residency did during it (objects evicted and
    /// restored since the previous step).
    pub fn arena_table(&self, run: u64) -> String {
        let mib = |b: usize| format!("{:.3} MiB", b as f64 / f64::from(1 << 20));
        let mut out = format!(
            "{:>4}  {:<28} {:>14} {:>14} {:>14} {:>14}  residency action\n",
            "step", "plan work", "preparation", "prepared", "execution", "io"
        );
        let mut before: Option<StepMemory> = None;
        let steps = self
            .events()
            .into_iter()
            .filter(|e| e.run == run && e.lane == TraceLane::Inference);
        for (i, e) in steps.enumerate() {
            let Some(m) = e.memory else {
                continue;
            };
            let (evicted, restored) = before.map_or((m.evictions, m.restores), |b| {
                (m.evictions - b.evictions, m.restores - b.restores)
            });
            let action = match (evicted, restored) {
                (0, 0) => "none".to_owned(),
                (e, r) => format!("evicted {e}, restored {r}"),
            };
            let live = |d: Domain| mib(m.live[d.index()]);
            let _ = writeln!(
                out,
                "{i:>4}  {:<28} {:>14} {:>14} {:>14} {:>14}  {action}",
                e.name,
                live(Domain::Preparation),
                live(Domain::Prepared),
                live(Domain::Execution),
                live(Domain::Io)
            );
            before = Some(m);
        }
        out
    }

    /// Every event so far, in recording order.
    pub fn events(&self) -> Vec<TraceEvent> {
        self.events.with(|e| e.clone())
    }

    /// Forgets every event (the origin stays).
    pub fn clear(&self) {
        self.events.with(Vec::clear);
    }

    /// Chrome trace-event JSON (`{"traceEvents": [...]}`, complete events in
    /// µs, one thread per lane), which Perfetto and `chrome://tracing` open.
    pub fn to_chrome_json(&self) -> String {
        let events = self.events();
        let mut out = String::from("{\"traceEvents\":[");
        for (i, lane) in TraceLane::ALL.iter().enumerate() {
            let _ = write!(
                out,
                "{}{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":{},\"args\":{{\"name\":\"{}\"}}}}",
                if i == 0 { "" } else { "," },
                i + 1,
                lane.name()
            );
        }
        for e in &events {
            let tid = TraceLane::ALL
                .iter()
                .position(|l| *l == e.lane)
                .unwrap_or(0)
                + 1;
            let _ = write!(
                out,
                ",{{\"name\":\"{}\",\"cat\":\"{}\",\"ph\":\"X\",\"pid\":1,\"tid\":{tid},\"ts\":{:.3},\"dur\":{:.3},\"args\":{{\"run\":{}}}}}",
                escape(&e.name),
                e.lane.name(),
                e.start.as_secs_f64() * 1e6,
                e.end.saturating_sub(e.start).as_secs_f64() * 1e6,
                e.run
            );
        }
        out.push_str("],\"displayTimeUnit\":\"ms\"}");
        out
    }

    /// An ASCII timeline, `width` columns wide: one row per lane, `#` where
    /// the lane was busy.
    pub fn timeline(&self, width: usize) -> String {
        let events = self.events();
        let end = events
            .iter()
            .map(|e| e.end)
            .max()
            .unwrap_or_default()
            .max(Duration::from_nanos(1));
        let width = width.max(10);
        let mut out = String::new();
        for lane in TraceLane::ALL {
            let mut row = vec![b'.'; width];
            for e in events.iter().filter(|e| e.lane == lane) {
                let a = (e.start.as_secs_f64() / end.as_secs_f64() * width as f64) as usize;
                let b = (e.end.as_secs_f64() / end.as_secs_f64() * width as f64).ceil() as usize;
                for c in &mut row[a.min(width - 1)..b.clamp(a + 1, width)] {
                    *c = b'#';
                }
            }
            let _ = writeln!(
                out,
                "{:>9} |{}|",
                lane.name(),
                String::from_utf8(row).unwrap_or_default()
            );
        }
        let _ = writeln!(
            out,
            "{:>9}  0{:>w$.1} ms",
            "",
            end.as_secs_f64() * 1e3,
            w = width
        );
        out
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}
