import pytest

from paged_kv import InvalidArgument, InvalidBlock, OutOfBlocks
from paged_kv.course import checks
from paged_kv.course.naive import ScanBlockPool, generate_contiguous
from paged_kv.serving.model import TinyLM, greedy_dense


def test_scan_pool_allocates_correctly_but_scans():
    checks.check_allocate(ScanBlockPool)
    with pytest.raises(checks.CheckFailed) as failure:
        checks.check_constant_time_allocate(ScanBlockPool)
    assert failure.value.cause == "work_grows"


def test_scan_pool_misses_a_double_free_inside_one_call():
    with pytest.raises(checks.CheckFailed) as failure:
        checks.check_release(ScanBlockPool)
    assert "release" in str(failure.value).splitlines()[0]


def test_scan_pool_refuses_the_obvious_errors():
    pool = ScanBlockPool(2)
    with pytest.raises(OutOfBlocks):
        pool.allocate(3)
    with pytest.raises(InvalidBlock):
        pool.release([0])


def test_length_keyed_prefix_cache_returns_another_prompts_blocks():
    from paged_kv.course.naive import LengthKeyedPrefixCache

    cache = LengthKeyedPrefixCache()
    cache.insert([1, 2, 3], [7, 8])
    assert cache.lookup([9, 9, 9]) == [7, 8]  # different tokens, same length: wrong hit
    assert cache.lookup([1, 2]) is None


def test_a_contiguous_cache_decodes_the_dense_tokens():
    model = TinyLM(seed=4)
    prompt = list(range(60, 91))
    assert generate_contiguous(model, prompt, 6) == greedy_dense(model, prompt, 6)
    assert generate_contiguous(model, prompt, 6, reserve=64) == greedy_dense(model, prompt, 6)
    with pytest.raises(InvalidArgument, match="reserve"):
        generate_contiguous(model, prompt, 6, reserve=36)
