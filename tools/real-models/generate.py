#!/usr/bin/env python3
"""Tiny random-weight decoder models from the producers people use.

For each architecture (Llama, Qwen2, Phi-3, Mistral) a random-weight
checkpoint is made from a transformers config (no hub access), then exported
by each producer:

  torch-dynamo        torch.onnx.export(dynamo=True), the default opset,
                      transformers' default (sdpa) attention
  torch-dynamo-op23   the same at opset_version=23: ONNX Attention and
                      RotaryEmbedding nodes
  torchscript         torch.onnx.export(dynamo=False), eager attention
  optimum             optimum-cli export onnx --task text-generation-with-past
                      (only when OPTIMUM_PYTHON names a python with optimum-onnx)
  nbits-sym           onnxruntime MatMulNBitsQuantizer, block 32, symmetric
  nbits-asym          the same, asymmetric (zero points)
  nbits-qdq           the same in QDQ form (DequantizeLinear(int4) -> MatMul),
                      from the opset-23 dynamo export
  genai-int4          onnxruntime_genai.models.builder -p int4 -e cpu
  genai-fp32          onnxruntime_genai.models.builder -p fp32 -e cpu

Every model goes to OUT/<arch>-<producer>/ (model.onnx plus whatever
external data the producer writes), and OUT/versions.json records the
package versions and which producer failed on what. The quantizer variants
start from the torchscript export (QDQ: the opset-23 dynamo export).

    target/rm-venv/bin/python tools/real-models/generate.py --out tests/models/real
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

SEED = 1234
LAYERS = 2
HIDDEN = 64
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 80  # never equal to the vocabulary: the GenAI builder finds the LM head by it
VOCAB = 256
MAX_POS = 256


def configs():
    from transformers import Gemma2Config, LlamaConfig, MistralConfig, Phi3Config, Qwen2Config

    common = dict(
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        vocab_size=VOCAB,
        max_position_embeddings=MAX_POS,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
    )
    return {
        "llama": ("LlamaForCausalLM", LlamaConfig(**common)),
        "qwen2": ("Qwen2ForCausalLM", Qwen2Config(**common, use_sliding_window=False)),
        "phi3": ("Phi3ForCausalLM", Phi3Config(**common, pad_token_id=0, original_max_position_embeddings=MAX_POS)),
        "mistral": ("MistralForCausalLM", MistralConfig(**common, sliding_window=None)),
        # Sliding-window layers (a window shorter than the test sequences)
        # alternate with global ones; attention logits and final logits are
        # soft-capped.
        "gemma2": ("Gemma2ForCausalLM", Gemma2Config(**common, head_dim=HIDDEN // HEADS, sliding_window=8,
                                                     query_pre_attn_scalar=HIDDEN // HEADS,
                                                     attn_logit_softcapping=50.0, final_logit_softcapping=30.0)),
    }


def checkpoint(arch: str, work: Path) -> Path:
    import torch
    import transformers

    cls_name, config = configs()[arch]
    torch.manual_seed(SEED)
    model = getattr(transformers, cls_name)(config).eval()
    # Larger-than-default weights so that logits differ visibly between tokens.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.08)
    out = work / f"hf-{arch}"
    model.save_pretrained(out)
    tokenizer().save_pretrained(out)
    return out


def tokenizer():
    """A word-level tokenizer over `t0 .. t{VOCAB-1}`: the GenAI builder and
    optimum save a tokenizer next to the model, so the checkpoint needs one."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", bos_token="t1",
                                   eos_token="t2", pad_token="t0")


class Wrapper:
    """forward(input_ids, attention_mask, position_ids, *pasts) -> (logits, *presents)."""

    @staticmethod
    def build(model):
        import torch
        from transformers import DynamicCache

        class W(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask, position_ids, *pasts):
                cache = DynamicCache()
                for i in range(LAYERS):
                    cache.update(pasts[2 * i], pasts[2 * i + 1], i)
                out = self.m(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    position_ids=position_ids,
                    past_key_values=cache,
                    use_cache=True,
                )
                pkv = out.past_key_values
                presents = []
                for i in range(LAYERS):
                    if hasattr(pkv, "layers"):
                        presents += [pkv.layers[i].keys, pkv.layers[i].values]
                    else:
                        presents += [pkv.key_cache[i], pkv.value_cache[i]]
                return (out.logits, *presents)

        return W(model).eval()


def io_names():
    inputs = ["input_ids", "attention_mask", "position_ids"]
    outputs = ["logits"]
    for i in range(LAYERS):
        inputs += [f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
        outputs += [f"present.{i}.key", f"present.{i}.value"]
    return inputs, outputs


def sample_inputs(past: int = 3, new: int = 2):
    import torch

    head = HIDDEN // HEADS
    ids = torch.randint(0, VOCAB, (1, new), dtype=torch.int64)
    mask = torch.ones((1, past + new), dtype=torch.int64)
    pos = torch.arange(past, past + new, dtype=torch.int64).unsqueeze(0)
    pasts = []
    for _ in range(LAYERS):
        pasts += [torch.randn(1, KV_HEADS, past, head), torch.randn(1, KV_HEADS, past, head)]
    return (ids, mask, pos, *pasts)


def torch_export(hf: Path, out: Path, dynamo: bool, opset: int | None):
    import torch
    import transformers

    # transformers' default attention (sdpa): at opset 23 the dynamo exporter
    # turns it into ONNX Attention and RotaryEmbedding; TorchScript keeps
    # the eager form (MatMul, Softmax).
    attn = "sdpa" if dynamo else "eager"
    model = transformers.AutoModelForCausalLM.from_pretrained(hf, attn_implementation=attn).eval()
    w = Wrapper.build(model)
    inputs, outputs = io_names()
    dyn = {"input_ids": {0: "batch_size", 1: "sequence_length"},
           "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
           "position_ids": {0: "batch_size", 1: "sequence_length"},
           "logits": {0: "batch_size", 1: "sequence_length"}}
    for i in range(LAYERS):
        for kv in ("key", "value"):
            dyn[f"past_key_values.{i}.{kv}"] = {0: "batch_size", 2: "past_sequence_length"}
            dyn[f"present.{i}.{kv}"] = {0: "batch_size", 2: "total_sequence_length"}
    out.mkdir(parents=True, exist_ok=True)
    if dynamo:
        # torch.export names the dims itself (`s10`, `s43 + s70`): exactly what
        # users bring. AUTO lets it derive the mask length as past + new.
        auto = torch.export.Dim.AUTO
        shapes = ({1: auto}, {1: auto}, {1: auto}, tuple({2: auto} for _ in range(2 * LAYERS)))
        kwargs = dict(input_names=inputs, output_names=outputs, dynamic_shapes=shapes, dynamo=True)
    else:
        kwargs = dict(input_names=inputs, output_names=outputs, dynamic_axes=dyn, dynamo=False)
    if opset is not None:
        kwargs["opset_version"] = opset
    with torch.no_grad():
        torch.onnx.export(w, sample_inputs(), str(out / "model.onnx"), **kwargs)


def nbits(src: Path, out: Path, symmetric: bool, qdq: bool):
    import onnx
    from onnxruntime.quantization import matmul_nbits_quantizer as mq
    from onnxruntime.quantization.quant_utils import QuantFormat

    model = onnx.load(str(src / "model.onnx"))
    config = mq.DefaultWeightOnlyQuantConfig(
        block_size=32,
        is_symmetric=symmetric,
        quant_format=QuantFormat.QDQ if qdq else QuantFormat.QOperator,
        op_types_to_quantize=("MatMul",),
    )
    q = mq.MatMulNBitsQuantizer(model, algo_config=config)
    q.process()
    out.mkdir(parents=True, exist_ok=True)
    q.model.save_model_to_file(str(out / "model.onnx"), use_external_data_format=False)


def genai(hf: Path, out: Path, precision: str, work: Path):
    cache = work / f"genai-cache-{precision}"
    tmp = work / f"genai-out-{hf.name}-{precision}"
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o", str(tmp),
           "-p", precision, "-e", "cpu", "-c", str(cache)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    out.mkdir(parents=True, exist_ok=True)
    for f in tmp.iterdir():
        if f.name.endswith((".onnx", ".onnx.data", ".json")) and "tokenizer" not in f.name:
            shutil.copy(f, out / f.name)


def optimum(hf: Path, out: Path, work: Path):
    py = os.environ.get("OPTIMUM_PYTHON")
    if not py:
        raise RuntimeError("OPTIMUM_PYTHON is not set (a python with optimum-onnx; see README.md)")
    tmp = work / f"optimum-{hf.name}"
    subprocess.run([py, "-m", "optimum.exporters.onnx", "--model", str(hf),
                    "--task", "text-generation-with-past", str(tmp)],
                   check=True, capture_output=True, text=True)
    out.mkdir(parents=True, exist_ok=True)
    for f in tmp.iterdir():
        if f.suffix in (".onnx", ".onnx_data") or f.name.endswith(".data"):
            shutil.copy(f, out / f.name)


def versions():
    out = {}
    for pkg in ("torch", "transformers", "onnx", "onnxruntime", "onnxscript", "onnx_ir",
                "onnxruntime_genai", "numpy"):
        try:
            mod = __import__(pkg)
            out[pkg] = getattr(mod, "__version__", "?")
        except Exception as e:  # noqa: BLE001 - recorded, not fatal
            out[pkg] = f"missing: {e}"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--arch", default="llama,qwen2,phi3,mistral")
    ap.add_argument("--producers", default=None,
                    help="comma-separated; default: every producer, and for Mistral a subset "
                         "(the committed set stays under 14 MB)")
    ap.add_argument("--size", choices=("tiny", "tiny-bpe", "tiny-llm", "8x"), default="tiny",
                    help="tiny: the committed test models; tiny-bpe: the same with vocab 600 (the "
                         "byte-level BPE tokenizer's, written beside them by tokenizers_train.py), "
                         "folders named <arch>-<producer>-bpe; tiny-llm: hidden 512, 4 layers, 8 heads, "
                         "vocab 8192, the benchmark size; 8x: hidden 1024, 8 layers, 16 heads, "
                         "intermediate 2816, vocab 32000, the 8x fixture's shape (neither committed)")
    args = ap.parse_args()
    global LAYERS, HIDDEN, HEADS, KV_HEADS, INTERMEDIATE, VOCAB, MAX_POS
    suffix = ""
    if args.size == "tiny-bpe":
        VOCAB, suffix = 600, "-bpe"
    elif args.size == "tiny-llm":
        LAYERS, HIDDEN, HEADS, KV_HEADS, INTERMEDIATE, VOCAB, MAX_POS = 4, 512, 8, 8, 2048, 8192, 512
    elif args.size == "8x":
        LAYERS, HIDDEN, HEADS, KV_HEADS, INTERMEDIATE, VOCAB, MAX_POS = 8, 1024, 16, 16, 2816, 32000, 512
    all_producers = ("torch-dynamo,torch-dynamo-op23,torchscript,optimum,"
                     "nbits-sym,nbits-asym,nbits-qdq,genai-int4,genai-fp32")
    subset = {"mistral": "torchscript,optimum,nbits-qdq,genai-int4", "gemma2": "genai-fp32,genai-int4"}
    args.out.mkdir(parents=True, exist_ok=True)
    # The `-bpe` folders' shape is recorded apart from the others'.
    config_key = f"config{suffix}"
    report = {"versions": versions(), config_key: dict(layers=LAYERS, hidden=HIDDEN, heads=HEADS,
              kv_heads=KV_HEADS, intermediate=INTERMEDIATE, vocab=VOCAB), "made": [], "failed": {}}
    temporary: list[Path] = []  # quantizer bases not asked for
    with tempfile.TemporaryDirectory() as tmpdir:
        work = Path(tmpdir)
        for arch in args.arch.split(","):
            hf = checkpoint(arch, work)
            producers = (args.producers or subset.get(arch, all_producers)).split(",")
            for p in producers:
                out = args.out / f"{arch}-{p}{suffix}"
                shutil.rmtree(out, ignore_errors=True)
                try:
                    if p == "torch-dynamo":
                        torch_export(hf, out, True, None)
                    elif p == "torch-dynamo-op23":
                        torch_export(hf, out, True, 23)
                    elif p == "torchscript":
                        torch_export(hf, out, False, 17)
                    elif p.startswith("nbits-"):
                        # QDQ needs blocked DequantizeLinear (opset 21): the
                        # quantizer raises the opset but leaves opset-17 forms
                        # (ReduceMean's `axes` attribute) behind, so its base
                        # is the opset-23 dynamo export.
                        qdq = p == "nbits-qdq"
                        base = args.out / f"{arch}-{'torch-dynamo-op23' if qdq else 'torchscript'}"
                        if not (base / "model.onnx").exists():
                            torch_export(hf, base, qdq, 23 if qdq else 17)
                            if base.name.removeprefix(f"{arch}-") not in producers:
                                temporary.append(base)
                        nbits(base, out, symmetric=(p == "nbits-sym"), qdq=(p == "nbits-qdq"))
                    elif p == "genai-int4":
                        genai(hf, out, "int4", work)
                    elif p == "genai-fp32":
                        genai(hf, out, "fp32", work)
                    elif p == "optimum":
                        optimum(hf, out, work)
                    else:
                        raise ValueError(f"unknown producer {p}")
                    report["made"].append(out.name)
                    print(f"ok     {out.name}", flush=True)
                except Exception as e:  # noqa: BLE001 - one producer failing must not stop the others
                    shutil.rmtree(out, ignore_errors=True)
                    detail = getattr(e, "stderr", None) or traceback.format_exc()
                    report["failed"][out.name] = str(detail)[-2000:]
                    print(f"FAILED {out.name}: {str(e)[:200]}", flush=True)
    for t in temporary:
        shutil.rmtree(t, ignore_errors=True)
    # A partial run (--arch, --producers) updates the record of the others.
    record = args.out / "versions.json"
    if record.exists():
        old = json.loads(record.read_text())
        for key, value in old.items():
            if key.startswith("config") and key not in report:
                report[key] = value
        report["made"] = [m for m in old.get("made", []) if m not in report["made"]
                          and (args.out / m).exists()] + report["made"]
        report["failed"] = {**{k: v for k, v in old.get("failed", {}).items()
                               if k not in report["made"]}, **report["failed"]}
    (args.out / "versions.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
