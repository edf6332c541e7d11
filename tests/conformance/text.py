#!/usr/bin/env python3
"""Text in and out against the reference implementations.

* Every committed tokenizer (tests/models/tokenizers/*: byte-level BPE with
  a look-ahead split regex, Unigram, WordPiece; and the ones beside the
  real models) encodes a corpus of mixed scripts, emoji, code, long
  whitespace runs and long inputs to the ids of the `tokenizers` Python
  package, and decodes them to its text (`onnx-prepared tokenize`).
* Chat templates render as `transformers` renders them (Jinja2's sandbox
  with trim_blocks, lstrip_blocks, loop controls, `raise_exception`,
  `tojson`), errors included.
* For every GenAI and optimum folder of tests/models/real: `generate
  --prompt TEXT` (greedy, 16 tokens) gives the tokens of `--prompt-ids`
  with the Python tokenizer's ids and the text of its decode; `--chat`
  gives the tokens of the template rendered by Jinja2 and encoded without
  special tokens; sampling with a seed is reproducible.

    target/venv/bin/python tests/conformance/text.py --bin target/release/onnx-prepared
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.sandbox
from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parents[2]

CORPUS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "  leading and trailing spaces  ",
    "tabs\tand\t\ttabs, newlines\n\n\nand\r\nCRLF",
    "a" + " " * 300 + "b",                       # a long whitespace run (look-ahead split)
    "\n" * 50 + "end",
    "Привет, мир! Как дела? Ελληνικά, עברית, العربية, हिन्दी, ไทย",
    "日本語のテキストと中文文本，한국어 텍스트。",
    "emoji 😀🎉👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 and keycaps 1️⃣",
    "def f(x):\n    return {'a': [x, x**2]}  # comment\n\tif x != 0: pass",
    "fn main() { let v: Vec<u8> = (0..10).map(|i| i * 2).collect(); }",
    "I'm sure they've said we'd go; you'll see it's FINE, DON'T worry",
    "numbers 12345 67.89 -0.5e10 0x1F 1,000,000",
    "Ünïcödé naïve café façade Å ﬁ ① ＡＢＣ",       # NFKC and lowercasing normalizers
    "<|im_start|>user\nhi<|im_end|> <s> </s> [CLS] [SEP]",   # special tokens in text
    " ".join(["token"] * 2000),                  # a long input
    "x" * 5000,
    "",
]

CHATS = [
    [{"role": "user", "content": "What is 2 + 2?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  Hi there  "}],
    [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
     {"role": "user", "content": "three — «quotes» and 😀"}],
    [{"role": "assistant", "content": "out of order"}],     # raise_exception in the Llama-2 template
]


def reference_render(config: dict, messages: list) -> dict:
    """As transformers' apply_chat_template renders it."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    special = {k: (v["content"] if isinstance(v, dict) else v) for k, v in config.items()
               if k.endswith("_token") and v is not None}
    try:
        return {"prompt": env.from_string(config["chat_template"]).render(
            messages=messages, add_generation_prompt=True, **special)}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}


def run(cmd: list[str]) -> list[dict]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def check_tokenizer(binary: str, folder: Path, work: Path) -> list[str]:
    failures = []
    ref = Tokenizer.from_file(str(folder / "tokenizer.json"))
    corpus_file = work / "corpus.json"
    corpus_file.write_text(json.dumps(CORPUS))
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    chats_file = work / "chats.json"
    chats_file.write_text(json.dumps(CHATS))
    cmd = [binary, "tokenize", str(folder), "--file", str(corpus_file)]
    if "chat_template" in config:
        cmd += ["--chats", str(chats_file)]
    out = run(cmd)
    for special in (True, False):
        got = out[:len(CORPUS)] if special else run([binary, "tokenize", str(folder), "--file",
                                                         str(corpus_file), "--no-special"])
        for text, ours in zip(CORPUS, got):
            want = ref.encode(text, add_special_tokens=special).ids
            label = f"{folder.name}: {text[:30]!r} (special tokens {'added' if special else 'not added'})"
            if ours["ids"] != want:
                failures.append(f"{label}: ids {ours['ids'][:12]}... != {want[:12]}...")
                continue
            for key, skip in (("decoded", False), ("decoded_skip_special", True)):
                if ours[key] != ref.decode(want, skip_special_tokens=skip):
                    failures.append(f"{label}: {key} {ours[key]!r} != {ref.decode(want, skip_special_tokens=skip)!r}")
    if "chat_template" in config:
        for messages, ours in zip(CHATS, out[len(CORPUS):]):
            want = reference_render(config, messages)
            if ("error" in ours) != ("error" in want) or ours.get("prompt") != want.get("prompt"):
                failures.append(f"{folder.name}: chat {messages[0]['content']!r}: {ours} != {want}")
            elif "error" in ours and want["error"] not in ours["error"]:
                failures.append(f"{folder.name}: chat error {ours['error']!r} lacks {want['error']!r}")
    print(f"  {folder.relative_to(ROOT)}: {len(CORPUS)} texts x2, {len(CHATS) if 'chat_template' in config else 0} chats:"
          f" {'OK' if not failures else 'FAILED'}")
    return failures


def check_generate(binary: str, folder: Path) -> list[str]:
    failures = []
    ref = Tokenizer.from_file(str(folder / "tokenizer.json"))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    base = [binary, "generate", str(folder), "--max-new-tokens", "16", "--json"]
    prompt = "the quick brown fox jumps over"
    ids = ref.encode(prompt).ids
    by_text = run(base + ["--prompt", prompt, "--ignore-eos"])[-1]
    by_ids = run(base + ["--prompt-ids", ",".join(map(str, ids)), "--ignore-eos"])[-1]
    if by_text["tokens"] != by_ids["tokens"] or len(by_text["tokens"]) != 16:
        failures.append(f"{folder.name}: --prompt tokens {by_text['tokens']} != --prompt-ids {by_ids['tokens']}")
    want_text = ref.decode(by_text["tokens"], skip_special_tokens=True)
    if by_text["text"] != want_text:
        failures.append(f"{folder.name}: text {by_text['text']!r} != {want_text!r}")
    chat = [{"role": "user", "content": "hello there"}]
    rendered = reference_render(config, chat)["prompt"]
    chat_ids = ref.encode(rendered, add_special_tokens=False).ids
    by_chat = run(base + ["--chat", "hello there", "--ignore-eos"])[-1]
    by_chat_ids = run(base + ["--prompt-ids", ",".join(map(str, chat_ids)), "--ignore-eos"])[-1]
    if by_chat["tokens"] != by_chat_ids["tokens"]:
        failures.append(f"{folder.name}: --chat tokens {by_chat['tokens']} != the rendered prompt's {by_chat_ids['tokens']}")
    sampled = [run(base + ["--prompt", prompt, "--temperature", "0.9", "--top-p", "0.95", "--seed", "7",
                           "--ignore-eos"])[-1]["tokens"] for _ in range(2)]
    if sampled[0] != sampled[1]:
        failures.append(f"{folder.name}: sampling with one seed gave {sampled[0]} then {sampled[1]}")
    # EOS stops generation unless --ignore-eos.
    stopped = run(base + ["--prompt", prompt])[-1]["tokens"]
    eos = 2
    cut = by_text["tokens"].index(eos) + 1 if eos in by_text["tokens"] else 16
    if stopped != by_text["tokens"][:cut]:
        failures.append(f"{folder.name}: with EOS stops {stopped} != {by_text['tokens'][:cut]}")
    print(f"  {folder.name}: generate --prompt/--chat/--seed: {'OK' if not failures else 'FAILED'}")
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    args = ap.parse_args()
    failures = []
    folders = sorted((ROOT / "tests/models/tokenizers").iterdir())
    real = sorted(p for p in (ROOT / "tests/models/real").iterdir() if (p / "tokenizer.json").is_file())
    with tempfile.TemporaryDirectory() as work:
        for folder in folders + real[:1]:
            failures += check_tokenizer(args.bin, folder, Path(work))
    for folder in real:
        failures += check_generate(args.bin, folder)
    for f in failures:
        print("FAIL", f)
    print(f"{len(folders) + 1 + len(real)} checked, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
