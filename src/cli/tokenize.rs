//! `onnx-prepared tokenize`: a model folder's tokenizer and chat template
//! on given texts, as JSON (what scripts compare with the `tokenizers`
//! Python package and `transformers`' template rendering).

use std::path::PathBuf;

use onnx_prepared_text::{Message, ModelFolder};

/// Encode texts with a model folder's `tokenizer.json` (and render conversations with its chat template): one JSON object per line.
#[derive(clap::Args, Debug)]
pub struct TokenizeArgs {
    /// A model folder, a `.onnx` file in one, or a folder with only a `tokenizer.json`.
    path: PathBuf,
    /// A text to encode (repeatable): prints `{"ids": [...], "decoded": ..., "decoded_skip_special": ...}`.
    #[arg(long)]
    text: Vec<String>,
    /// A JSON file holding a list of texts to encode, as --text.
    #[arg(long, value_name = "FILE")]
    file: Option<PathBuf>,
    /// A JSON file holding a list of conversations (lists of `{"role", "content"}`): prints `{"prompt": ...}` for each, with the assistant's turn opened.
    #[arg(long, value_name = "FILE")]
    chats: Option<PathBuf>,
    /// Encode without the special tokens the post-processor adds.
    #[arg(long)]
    no_special: bool,
}

/// `tokenize`.
pub fn main(args: &TokenizeArgs) -> Result<(), Box<dyn std::error::Error>> {
    let folder =
        if args.path.join("tokenizer.json").is_file() && !args.path.join("model.onnx").exists() {
            None
        } else {
            Some(ModelFolder::open(&args.path)?)
        };
    let tokenizer = match &folder {
        Some(f) => f.tokenizer()?,
        None => onnx_prepared_text::Tokenizer::from_file(args.path.join("tokenizer.json"))?,
    };
    let read = |path: &PathBuf| -> Result<serde_json::Value, Box<dyn std::error::Error>> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?)
    };
    let mut texts = args.text.clone();
    if let Some(file) = &args.file {
        let list: Vec<String> = serde_json::from_value(read(file)?)
            .map_err(|e| format!("{}: not a list of strings: {e}", file.display()))?;
        texts.extend(list);
    }
    for text in &texts {
        let ids = tokenizer.encode(text, !args.no_special)?;
        println!(
            "{}",
            serde_json::json!({
                "ids": ids,
                "decoded": tokenizer.decode(&ids, false)?,
                "decoded_skip_special": tokenizer.decode(&ids, true)?,
            })
        );
    }
    if let Some(file) = &args.chats {
        let chats: Vec<Vec<Message>> = serde_json::from_value(read(file)?)
            .map_err(|e| format!("{}: not a list of conversations: {e}", file.display()))?;
        let template = match &folder {
            Some(f) => f.chat_template()?.clone(),
            None => onnx_prepared_text::ChatTemplate::from_folder(&args.path)?
                .ok_or_else(|| format!("{}: no chat template", args.path.display()))?,
        };
        for chat in &chats {
            let prompt = match template.render(chat, true) {
                Ok(p) => serde_json::json!({ "prompt": p }),
                Err(e) => serde_json::json!({ "error": e.to_string() }),
            };
            println!("{prompt}");
        }
    }
    Ok(())
}
