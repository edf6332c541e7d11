"""onnx_prepared.genai against onnxruntime-genai: one unchanged greedy
script (the loop of onnxruntime-genai's examples) gives the same tokens
under both imports on the committed GenAI-builder folders, and the
tokenizer, stream, chat template, sampling and rewind behave as
onnxruntime-genai's do."""

from __future__ import annotations

import importlib
import textwrap

import numpy as np
import pytest
from _models import REAL

import onnx_prepared.genai as opg

FOLDERS = ["llama-genai-fp32", "qwen2-genai-fp32", "qwen2-genai-fp32-bpe", "phi3-genai-fp32", "gemma2-genai-fp32"]

# An onnxruntime-genai greedy script as its users write it; `og` is bound
# to either module.
SCRIPT = textwrap.dedent("""
    model = og.Model(folder)
    tokenizer = og.Tokenizer(model)
    stream = tokenizer.create_stream()
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=40, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(tokenizer.encode(prompt))
    text = ""
    while not generator.is_done():
        generator.generate_next_token()
        text += stream.decode(generator.get_next_tokens()[0])
    tokens = [int(t) for t in generator.get_sequence(0)]
""")


def run_script(og, folder: str, prompt: str) -> dict:
    scope = {"og": og, "folder": str(REAL / folder), "prompt": prompt}
    exec(SCRIPT, scope)  # noqa: S102 - the script under test
    return {"tokens": scope["tokens"], "text": scope["text"]}


@pytest.mark.parametrize("folder", FOLDERS)
def test_an_unchanged_greedy_script_gives_onnxruntime_genais_tokens(folder):
    og = pytest.importorskip("onnxruntime_genai")
    prompt = "the quick brown fox jumps over the lazy dog"
    ours = run_script(opg, folder, prompt)
    ref = run_script(og, folder, prompt)
    assert ours["tokens"] == ref["tokens"]
    assert ours["text"] == ref["text"]
    assert len(ours["tokens"]) > len(opg.Tokenizer(opg.Model(str(REAL / folder))).encode(prompt))


def test_tokenizer_stream_and_chat_template_match_their_references():
    """Encodings equal the `tokenizers` package's (onnxruntime-genai's own
    tokenizer splits runs of spaces differently from it); streams and chat
    templates equal onnxruntime-genai's."""
    og = pytest.importorskip("onnxruntime_genai")
    tokenizers = pytest.importorskip("tokenizers")
    folder = str(REAL / "llama-genai-fp32")
    ours_t, ref_t = opg.Tokenizer(opg.Model(folder)), og.Tokenizer(og.Model(folder))
    hf = tokenizers.Tokenizer.from_file(str(REAL / "llama-genai-fp32" / "tokenizer.json"))
    for text in ["Hello, world!", "  spaces   and\nnewlines ", "Привет 😀"]:
        assert list(ours_t.encode(text)) == hf.encode(text).ids
    for text in ["Hello, world!", "Привет 😀 the quick brown fox"]:
        ids = ours_t.encode(text)
        np.testing.assert_array_equal(ids, ref_t.encode(text))
        assert ours_t.decode(ids) == ref_t.decode(ids)
        ours_s, ref_s = ours_t.create_stream(), ref_t.create_stream()
        assert "".join(ours_s.decode(t) for t in ids) == "".join(ref_s.decode(t) for t in ids)
    import json
    config = json.loads((REAL / "llama-genai-fp32" / "tokenizer_config.json").read_text())
    template = config["chat_template"].replace("bos_token", "'<s>'").replace("eos_token", "'</s>'")
    messages = '[{"role": "user", "content": "hi there"}, {"role": "assistant", "content": "hello"}]'
    ours = ours_t.apply_chat_template(messages, template_str=template, add_generation_prompt=True)
    assert ours == ref_t.apply_chat_template(messages=messages, template_str=template, add_generation_prompt=True)
    # Without a template the folder's is used (onnxruntime-genai needs one).
    assert ours_t.apply_chat_template(messages) == ours


def test_sampling_is_reproducible_by_seed_and_rewind_repeats_the_tokens():
    model = opg.Model(str(REAL / "qwen2-genai-fp32"))
    tokenizer = opg.Tokenizer(model)
    prompt = tokenizer.encode("the quick brown fox")

    def sample(seed):
        params = opg.GeneratorParams(model)
        params.set_search_options(max_length=30, do_sample=True, temperature=0.9, top_k=20, random_seed=seed)
        g = opg.Generator(model, params)
        g.append_tokens(prompt)
        while not g.is_done():
            g.generate_next_token()
        return [int(t) for t in g.get_sequence(0)]

    first = sample(3)
    assert first == sample(3)
    assert len(prompt) < len(first) <= 30

    params = opg.GeneratorParams(model)
    params.set_search_options(max_length=30)
    g = opg.Generator(model, params)
    g.append_tokens(prompt)
    for _ in range(6):
        g.generate_next_token()
    first = [int(t) for t in g.get_sequence(0)]
    g.rewind_to(len(prompt) + 2)
    assert [int(t) for t in g.get_sequence(0)] == first[: len(prompt) + 2]
    g.append_tokens([])  # nothing to run
    g.generate_next_token()
    g.generate_next_token()
    g.generate_next_token()
    g.generate_next_token()
    assert [int(t) for t in g.get_sequence(0)] == first
    with pytest.raises(ValueError):
        g.rewind_to(1000)


def test_a_folder_without_a_tokenizer_fails_clearly(tmp_path):
    import shutil
    shutil.copy(REAL / "llama-nbits-sym" / "model.onnx", tmp_path / "model.onnx")
    model = opg.Model(str(tmp_path))
    with pytest.raises(RuntimeError, match="no tokenizer.json"):
        opg.Tokenizer(model)
