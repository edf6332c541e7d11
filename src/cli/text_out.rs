//! What `generate` and `chat` share: the search flags, text streamed to
//! stdout as tokens arrive (held back while a stop string may be forming),
//! and Ctrl-C (between kernels, then between tokens).

use std::io::Write;
use std::sync::Arc;

use onnx_prepared::session::RunInterrupt;
use onnx_prepared_text::{SearchOptions, TextStream, Tokenizer};

/// The search flags over a folder's options.
#[derive(clap::Args, Debug)]
pub struct SearchArgs {
    /// Sample with the folder's options (`do_sample` true); a sampling flag below also turns sampling on.
    #[arg(long, conflicts_with = "greedy")]
    pub sample: bool,
    /// Take the largest logit every step, whatever the folder says.
    #[arg(long)]
    pub greedy: bool,
    /// Sampling temperature (> 0).
    #[arg(long, value_parser = positive)]
    pub temperature: Option<f32>,
    /// Sample among the K most likely tokens (0: all).
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Sample among the most likely tokens that hold this much probability (0 to 1).
    #[arg(long, value_parser = unit)]
    pub top_p: Option<f32>,
    /// Drop tokens less likely than this fraction of the most likely one (0 to 1).
    #[arg(long, value_parser = unit)]
    pub min_p: Option<f32>,
    /// Penalize every token already seen (transformers' repetition_penalty; 1: none).
    #[arg(long, value_parser = positive)]
    pub repetition_penalty: Option<f32>,
    /// The sampling seed: the same seed gives the same tokens.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Stop when the text contains this string (repeatable); the text ends before it.
    #[arg(long)]
    pub stop: Vec<String>,
    /// Do not stop at the model's EOS ids: generate exactly --max-new-tokens.
    #[arg(long)]
    pub ignore_eos: bool,
}

impl SearchArgs {
    /// The folder's search options under this command line's flags.
    pub fn apply(&self, folder: &SearchOptions) -> SearchOptions {
        let mut o = folder.clone();
        let mut sampling = self.sample;
        if let Some(t) = self.temperature {
            o.temperature = t;
            sampling = true;
        }
        if let Some(k) = self.top_k {
            o.top_k = k;
            sampling = true;
        }
        if let Some(p) = self.top_p {
            o.top_p = p;
            sampling = true;
        }
        if let Some(p) = self.min_p {
            o.min_p = p;
            sampling = true;
        }
        if let Some(p) = self.repetition_penalty {
            o.repetition_penalty = p;
        }
        if sampling {
            o.do_sample = true;
        }
        if self.greedy {
            o.do_sample = false;
        }
        o
    }
}

/// Ctrl-C while generating: the signal handler sets a [`RunInterrupt`],
/// which ends the run in progress between two kernels (a long prefill
/// included) and which the decoding loop checks between tokens; the text
/// so far stays printed and the process exits as after a normal end.
pub struct Interrupt {
    flag: Arc<RunInterrupt>,
}

impl Interrupt {
    pub fn install() -> std::io::Result<Self> {
        let flag = Arc::new(RunInterrupt::new());
        let handler = flag.clone();
        // SAFETY: the action runs in signal-handler context: it does one
        // atomic store (`RunInterrupt::interrupt`) through an `Arc` made
        // before registration — no allocation, lock or I/O — which is
        // async-signal-safe. It stays registered for the process's life.
        unsafe {
            signal_hook::low_level::register(signal_hook::consts::SIGINT, move || {
                handler.interrupt();
            })?;
        }
        Ok(Self { flag })
    }

    /// The flag to hand to contexts and generators.
    pub fn flag(&self) -> Arc<RunInterrupt> {
        self.flag.clone()
    }

    /// Whether Ctrl-C was pressed (since the last `reset`).
    pub fn happened(&self) -> bool {
        self.flag.is_set()
    }

    /// Forgets a Ctrl-C (the next chat turn runs).
    pub fn reset(&self) {
        self.flag.clear();
    }
}

/// The text as tokens arrive: streamed to stdout (unless JSON is asked
/// for), cut at the first stop string.
pub struct Output<'t> {
    stream: Option<TextStream<'t>>,
    stops: &'t [String],
    print: bool,
    /// The text so far (EOS and special tokens left out).
    pub text: String,
    /// Bytes of `text` already printed (held back while a stop string may
    /// be forming).
    printed: usize,
}

impl<'t> Output<'t> {
    pub fn new(tokenizer: Option<&'t Tokenizer>, stops: &'t [String], print: bool) -> Self {
        Self {
            stream: tokenizer.map(|t| t.stream(true)),
            stops,
            print,
            text: String::new(),
            printed: 0,
        }
    }

    /// Where the first stop string begins in the text, if one does.
    fn first_stop(&self) -> Option<usize> {
        self.stops
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| self.text.find(s.as_str()))
            .min()
    }

    /// Takes token `id`; true when a stop string completed.
    pub fn push(&mut self, id: i64, eos: bool) -> Result<bool, onnx_prepared_text::TextError> {
        let Some(stream) = &mut self.stream else {
            return Ok(false);
        };
        if !eos {
            self.text.push_str(&stream.step(id)?);
        }
        let stop_at = self.first_stop();
        if let Some(at) = stop_at {
            self.text.truncate(at);
        }
        // Hold back the longest tail that could still begin a stop string.
        let hold = if stop_at.is_some() || eos {
            0
        } else {
            self.stops
                .iter()
                .map(|s| {
                    (1..s.len())
                        .rev()
                        .find(|&n| s.is_char_boundary(n) && self.text.ends_with(&s[..n]))
                        .unwrap_or(0)
                })
                .max()
                .unwrap_or(0)
        };
        let upto = self.text.len() - hold;
        if self.print && upto > self.printed {
            let mut stdout = std::io::stdout().lock();
            // A closed stdout (a pipe into `head`) ends the printing, not the run.
            let _ = stdout
                .write_all(&self.text.as_bytes()[self.printed..upto])
                .and_then(|()| stdout.flush());
            self.printed = upto;
        }
        Ok(stop_at.is_some())
    }

    /// The end of the tokens: adds the text the decoder still held back (a
    /// character whose bytes never completed, as U+FFFD), cuts it at a stop
    /// string, and prints what was held back for a stop string that never
    /// completed.
    pub fn finish(&mut self) -> Result<(), onnx_prepared_text::TextError> {
        if let Some(stream) = &mut self.stream {
            self.text.push_str(&stream.finish()?);
            if let Some(at) = self.first_stop() {
                self.text.truncate(at.max(self.printed));
            }
        }
        if self.print && self.text.len() > self.printed {
            let mut stdout = std::io::stdout().lock();
            let _ = stdout
                .write_all(&self.text.as_bytes()[self.printed..])
                .and_then(|()| stdout.flush());
            self.printed = self.text.len();
        }
        Ok(())
    }
}

/// A float above 0.
pub fn positive(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("`{s}` is not a number above 0")),
    }
}

/// A float in [0, 1].
pub fn unit(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(format!("`{s}` is not a number from 0 to 1")),
    }
}
