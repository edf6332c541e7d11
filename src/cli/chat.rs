//! `onnx-prepared chat`: an interactive conversation with a model folder.
//! Each turn renders the whole conversation through the chat template and
//! runs only what the KV cache does not hold yet (the tokens after the
//! longest prefix shared with the cached sequence).

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Instant;

use onnx_prepared::decoder::{self, Generator};
use onnx_prepared::session::{RuntimeSession, SessionOptions};
use onnx_prepared_text::{Message, ModelFolder, Sampler};

use super::text_out::{Interrupt, Output, SearchArgs};

/// Chat with a model folder: each line on stdin is a user message, the reply streams to stdout; the KV cache carries the conversation across turns. Ctrl-C ends a reply, end of input ends the chat.
#[derive(clap::Args, Debug)]
pub struct ChatArgs {
    /// A model folder with `tokenizer.json` and a chat template.
    folder: PathBuf,
    /// A system message before the first user message.
    #[arg(long)]
    system: Option<String>,
    /// The most tokens of one reply (1 to 65,536).
    #[arg(long, default_value_t = 256, value_parser = super::generate::parse_new_tokens)]
    max_new_tokens: usize,
    /// Threads in all (1 to 1024).
    #[arg(long, default_value_t = 1, value_parser = crate::cli::common::parse_threads)]
    threads: u16,
    #[command(flatten)]
    search: SearchArgs,
}

/// `chat`.
pub fn main(args: &ChatArgs) -> Result<(), Box<dyn std::error::Error>> {
    let folder = ModelFolder::open(&args.folder)?;
    let tokenizer = folder.tokenizer()?;
    let template = folder.chat_template()?;
    let session = RuntimeSession::open(
        folder.model(),
        SessionOptions::default().with_threads(usize::from(args.threads)),
    )?;
    let cache = decoder::genai_kv_cache(folder.model()).unwrap_or(decoder::KvCache::Growing);
    let mut generator = Generator::new(&session, cache)?;
    let mut sampler = Sampler::new(args.search.apply(folder.search()), args.search.seed);
    let interrupt = Interrupt::install()?;
    generator.set_interrupt(Some(interrupt.flag()));
    let mut messages: Vec<Message> = args
        .system
        .iter()
        .map(|s| Message::new("system", s))
        .collect();
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        eprint!("> ");
        let _ = std::io::stderr().flush();
        let Some(line) = lines.next() else { break };
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        messages.push(Message::new("user", &line));
        let ids = tokenizer.encode(&template.render(&messages, true)?, false)?;
        // The longest prefix the cache holds; at least one token runs.
        let held = generator
            .sequence()
            .iter()
            .zip(&ids)
            .take_while(|(a, b)| a == b)
            .count()
            .min(ids.len() - 1);
        generator.rewind_to(held)?;
        interrupt.reset();
        let start = Instant::now();
        let mut out = Output::new(Some(&tokenizer), &args.search.stop, true);
        let mut tokens = 0;
        // Ctrl-C ends the reply: a run it interrupts (the prompt's, or a
        // token's) leaves the generator with an empty cache, which the
        // next turn refills.
        let mut step = generator.append(&ids[held..]);
        while step.is_ok() && tokens < args.max_new_tokens && !interrupt.happened() {
            let id = sampler
                .next(generator.logits()?, generator.sequence())
                .unwrap_or(0);
            let eos = !args.search.ignore_eos && sampler.options().is_eos(id);
            tokens += 1;
            if out.push(id, eos)? || eos {
                break;
            }
            step = generator.append(&[id]);
        }
        if let Err(e) = step
            && !(interrupt.happened() && e.kind() == onnx_prepared::ErrorKind::Cancelled)
        {
            return Err(e.into());
        }
        out.finish()?;
        println!();
        eprintln!(
            "[{tokens} tokens in {:.2?}; {held} of {} prompt tokens from the cache]",
            start.elapsed(),
            ids.len()
        );
        messages.push(Message::new("assistant", &out.text));
    }
    Ok(())
}
