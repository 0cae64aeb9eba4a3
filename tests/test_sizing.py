import pytest

from paged_kv import InvalidArgument
from paged_kv.study.sizing import KNOWN_MODELS, ModelShape


def test_opt_13b_needs_800_kib_per_token():
    assert KNOWN_MODELS["OPT-13B"].kv_bytes_per_token == 800 * 1024


def test_gqa_divides_the_cost_by_the_group_size():
    mha = ModelShape("mha", 32, 32, 128)
    gqa = ModelShape("gqa", 32, 8, 128)
    assert mha.kv_bytes_per_token == 4 * gqa.kv_bytes_per_token == 512 * 1024


def test_blocks_and_budgets():
    shape = KNOWN_MODELS["Llama-2-7B"]
    assert shape.kv_bytes_per_block(16) == 16 * 512 * 1024
    assert shape.tokens_that_fit(1024**3) == 2048


def test_bad_shapes_are_refused():
    with pytest.raises(InvalidArgument):
        ModelShape("bad", 0, 8, 128)
