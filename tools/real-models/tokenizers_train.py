#!/usr/bin/env python3
"""Small tokenizers of each model type, and the text files of model folders.

Trains, with the `tokenizers` Python package on a fixed corpus (the same
bytes every run):

* `bpe`       -- byte-level BPE with Qwen2's split regex (look-ahead included:
                 the Oniguruma semantics the runtime must reproduce), vocab 600;
* `unigram`   -- SentencePiece-style Unigram (NFKC, Metaspace), vocab 600
                 (pieces counted here: its trainer is not deterministic);
* `wordpiece` -- BERT-style WordPiece (lowercasing normalizer), vocab 600
                 (built from word counts: its trainer is not deterministic);

each into `tests/models/tokenizers/<type>/` with a `tokenizer_config.json`
carrying a chat template. Beside every GenAI-builder and optimum model of
`tests/models/real/` (vocabulary 256) it writes a 256-entry Unigram
tokenizer (`<unk>` 0, `<s>` 1, `</s>` 2: the EOS id those folders name)
with a Llama-2 chat template, beside the `-bpe` folders (vocabulary 600,
`generate.py --size tiny-bpe`) the byte-level BPE above with its ChatML
template, and for the optimum folders a `generation_config.json`.

Run by hand (CI only checks the committed files):

    python3 -m venv target/venv && target/venv/bin/pip install -r tools/requirements.txt
    target/venv/bin/python tools/real-models/tokenizers_train.py
"""
import json
import os

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # parallel training orders ties differently per run
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers, Regex

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests/models/tokenizers"
REAL = ROOT / "tests/models/real"

QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] "
          "+ '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
          "{% endif %}")
LLAMA2 = ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
          "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
          "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
          "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
          "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
          "{% if loop.index0 == 0 and system_message != false %}"
          "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
          "{% else %}{% set content = message['content'] %}{% endif %}"
          "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
          "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
          "{% endfor %}")
BERTISH = ("{% for m in messages %}{{ m.role | upper }}: {{ m.content | trim }}\n{% endfor %}"
           "{% if add_generation_prompt %}ASSISTANT:{% endif %}")


def corpus() -> list[str]:
    """Deterministic mixed text: prose, code, other scripts, emoji, spaces."""
    words = ("the quick brown fox jumps over a lazy dog while models stream tokens to users on small "
             "devices and runtimes prepare weights before the first output").split()
    lines = []
    for i in range(400):
        w = [words[(i * 7 + j * 3) % len(words)] for j in range(5 + i % 9)]
        lines.append(" ".join(w).capitalize() + ("." if i % 3 else "?"))
    lines += [
        "def main(argv):\n    return [x * 2 for x in argv if x]  # doubles",
        "fn next(&mut self) -> Option<u32> { self.0.checked_add(1) }",
        "Привет, мир! Как дела?", "日本語のテキストと中文文本。", "مرحبا بالعالم", "Ελληνικά κείμενα",
        "emoji 😀🎉👍🏽 and flags 🇫🇷", "tabs\tand    long     runs      of spaces\n\n\nnewlines",
        "numbers 12345 67.89 -0.5e10", "I'm sure they've said we'd go, you'll see it's fine",
    ]
    return lines * 3


def save(tok: Tokenizer, folder: Path, config: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"), pretty=True)
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def bpe(vocab: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    return tok


def unigram(vocab: int, bos: bool = True) -> Tokenizer:
    """Unigram's trainer is not deterministic either (its scores and ties
    vary per run), so the pieces are counted here: the specials, `▁` and
    every character, then the most frequent `▁`-prefixed words and their
    suffixes, each scored log(count / total) (ties by spelling)."""
    import math
    from collections import Counter
    norm = normalizers.NFKC()
    pre = pre_tokenizers.Metaspace()
    counts = Counter()
    for line in corpus():
        for w, _ in pre.pre_tokenize_str(norm.normalize_str(line)):
            counts[w] += 1
            for c in w:
                counts[c] += 1
            for i in range(2, len(w)):
                counts[w[i:]] += 1
    total = sum(counts.values())
    singles = sorted(c for c in counts if len(c) == 1)
    multi = sorted((p for p in counts if len(p) > 1), key=lambda p: (-counts[p], p))
    pieces = [["<unk>", 0.0], ["<s>", 0.0], ["</s>", 0.0]]
    pieces += [[p, round(math.log(counts[p] / total), 6)] for p in singles]
    pieces += [[p, round(math.log(counts[p] / total), 6)] for p in multi[: max(0, vocab - len(pieces))]]
    tok = Tokenizer(models.Unigram([tuple(p) for p in pieces], unk_id=0, byte_fallback=False))
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    tok.normalizer = norm
    tok.pre_tokenizer = pre
    tok.decoder = decoders.Metaspace()
    if bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B",
                                                           special_tokens=[("<s>", 1)])
    return tok


def wordpiece(vocab: int) -> Tokenizer:
    """WordPiece's trainer picks among tied merges per run, so the vocabulary
    is built here: the specials, every character (alone and as `##`
    continuation), then the most frequent words (ties by spelling)."""
    from collections import Counter
    norm = normalizers.BertNormalizer(lowercase=True)
    pre = pre_tokenizers.BertPreTokenizer()
    words = Counter(w for line in corpus() for w, _ in pre.pre_tokenize_str(norm.normalize_str(line)))
    chars = sorted({c for w in words for c in w})
    entries = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + ["##" + c for c in chars]
    for w, _ in sorted(words.items(), key=lambda e: (-e[1], e[0])):
        if len(entries) >= vocab:
            break
        if w not in entries:
            entries.append(w)
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(entries)}, unk_token="[UNK]"))
    tok.add_special_tokens(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tok.normalizer = norm
    tok.pre_tokenizer = pre
    tok.decoder = decoders.WordPiece()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
                                                       special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return tok


def main() -> None:
    save(bpe(600), OUT / "bpe", {"eos_token": "<|im_end|>", "chat_template": CHATML})
    save(unigram(600), OUT / "unigram", {"bos_token": "<s>", "eos_token": "</s>", "chat_template": LLAMA2})
    save(wordpiece(600), OUT / "wordpiece", {"cls_token": "[CLS]", "sep_token": "[SEP]", "chat_template": BERTISH})
    # Beside the models: no BOS from a post-processor (the chat template
    # writes it), because onnxruntime-genai's tokenizer does not apply one
    # to a Unigram model and its greedy scripts must see the same ids.
    small = unigram(256, bos=False)
    assert small.get_vocab_size() <= 256 and small.token_to_id("</s>") == 2
    # The vocabulary-600 models (`-bpe` folders): the byte-level BPE, whose
    # <|im_end|> is their EOS id 2.
    byte_level = bpe(600)
    assert byte_level.get_vocab_size() == 600 and byte_level.token_to_id("<|im_end|>") == 2
    for folder in sorted(REAL.iterdir()):
        if not folder.is_dir() or not any(k in folder.name for k in ("genai", "optimum")):
            continue
        if folder.name.endswith("-bpe"):
            save(byte_level, folder, {"eos_token": "<|im_end|>", "chat_template": CHATML})
        else:
            save(small, folder, {"bos_token": "<s>", "eos_token": "</s>", "chat_template": LLAMA2})
        if "optimum" in folder.name:
            (folder / "generation_config.json").write_text(json.dumps(
                {"bos_token_id": 1, "eos_token_id": 2, "do_sample": False}, indent=2) + "\n")
        print("wrote", folder.relative_to(ROOT))
    print("wrote", OUT.relative_to(ROOT))


if __name__ == "__main__":
    main()
