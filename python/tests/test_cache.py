"""The prepared cache across sessions: a first session under
build-if-missing writes every packed weight; a second one reads them, packs
nothing, reads no source byte and gives the same outputs."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import one_thread, tiny_llm_feeds

import onnx_prepared


def test_a_second_session_reads_the_cache(tiny_llm, tmp_path):
    cache = tmp_path / "cache"
    feeds = tiny_llm_feeds(4)

    first = onnx_prepared.InferenceSession(str(tiny_llm), one_thread(cache_dir=str(cache)))
    want = first.run(None, feeds)
    first.prepare()
    first.flush_cache()
    s = first.stats()
    assert s["prepacks"] > 0 and s["source_bytes_read"] > 0
    assert s["cache_hits"] == 0
    assert s["cache_writes"] == s["prepared_objects"]
    del first

    second = onnx_prepared.InferenceSession(
        tiny_llm, one_thread(cache_dir=cache, cache_policy="require-complete")
    )
    got = second.run(None, feeds)
    s = second.stats()
    assert s["cache_hits"] == s["prepared_objects"] > 0
    assert s["prepacks"] == 0, "a cached session packs nothing"
    assert s["source_bytes_read"] == 0, "a cached session reads no source byte"
    assert s["packed_bytes_read"] + s["packed_bytes_in_place"] > 0
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_require_complete_without_a_cache_fails_before_any_run(tiny_llm, tmp_path):
    with pytest.raises(onnx_prepared.CacheError) as e:
        onnx_prepared.InferenceSession(
            str(tiny_llm), one_thread(cache_dir=str(tmp_path / "empty"), cache_policy="require-complete")
        )
    assert e.value.kind == "cache"


def test_cache_policy_needs_a_folder_and_a_known_name(tiny_llm, tmp_path):
    with pytest.raises(ValueError, match="needs a cache_dir"):
        onnx_prepared.InferenceSession(str(tiny_llm), one_thread(cache_policy="read-only"))
    with pytest.raises(ValueError, match="not disabled"):
        onnx_prepared.InferenceSession(str(tiny_llm), one_thread(cache_dir=str(tmp_path), cache_policy="sometimes"))


def test_copied_in_payloads_survive_a_cache_emptied_under_the_session(tiny_llm, tmp_path):
    cache = tmp_path / "cache"
    feeds = tiny_llm_feeds(4)
    first = onnx_prepared.InferenceSession(str(tiny_llm), one_thread(cache_dir=str(cache)))
    want = first.run(None, feeds)
    first.flush_cache()
    del first

    opts = one_thread(cache_dir=str(cache), cache_policy="read-only")
    opts.cache_copy_in = True
    sess = onnx_prepared.InferenceSession(str(tiny_llm), opts)
    for g, w in zip(sess.run(None, feeds), want):
        np.testing.assert_array_equal(g, w)
    assert sess.stats()["source_bytes_read"] == 0
    # Another program truncates every payload: mapped, the next runs would
    # kill the process; copied in, they never look at the files again.
    for p in (cache / "payloads").iterdir():
        with open(p, "r+b") as f:
            f.truncate(0)
    for _ in range(2):
        for g, w in zip(sess.run(None, feeds), want):
            np.testing.assert_array_equal(g, w)
