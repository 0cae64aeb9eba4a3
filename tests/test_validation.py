"""paged_kv.validation: the whole-number and token-id checks every layer shares."""

import math

import numpy as np
import pytest
import torch

from paged_kv import InvalidArgument, KVCacheManager

# The cache layer's argument checks at their edges, and its documented defaults.


def test_nan_is_no_count():
    with pytest.raises(InvalidArgument):
        KVCacheManager(8, 4).can_allocate(math.nan)


# Token id 0 is a token like any other: in prompts, appends, hashes, the engine and the byte
# tokenizer (it is the NUL byte). A falsy-value check (`if token:`, `0 < t`) anywhere would
# drop or refuse it.


def test_zero_as_a_numpy_or_torch_integer_is_a_token_too():
    m = KVCacheManager(16, 4)
    m.add_sequence("np", np.zeros(5, dtype=np.int64))
    m.add_sequence("torch", torch.tensor([0, 0, 0, 0, 7]))
    m.add_sequence("mixed", [np.int32(0), 0, torch.tensor(0), 0, 1])
    assert [m.token_ids(s)[:4] for s in m.sequence_ids] == [[0] * 4] * 3
    assert m.num_cached_tokens("torch") == 4 and m.num_cached_tokens("mixed") == 4
    m.append_tokens("np", [np.int64(0), torch.tensor(0)])
    assert m.token_ids("np") == [0] * 7
