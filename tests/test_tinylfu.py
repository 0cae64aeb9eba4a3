"""paged_kv.cache.tinylfu: W-TinyLFU's window, frequency sketch and doorkeeper."""

import pytest

from paged_kv.cache.tinylfu import FrequencySketch, WTinyLFU

# Behaviours that mutation testing (tools/mutation_test.py) found no test pinning, in the cache
# layer: each test here kills at least one mutant that survived every other test of its module.


def test_w_tinylfu_adapts_its_window_once_per_sample_of_touches():
    """A sample is `sample_factor` x blocks tracked touches (a miss is one touch); at its end
    the window's share moves one step toward a better hit ratio."""
    policy = WTinyLFU(window_ratio=0.25, sample_factor=2)
    policy.touch(0)  # a miss: 1 touch of the sample's 2
    assert policy.window_ratio == 0.25
    policy.touch(0)  # a hit ends the sample: hit ratio 1/2, better than 0
    assert policy.window_ratio == 0.25 + WTinyLFU.step_ratio


@pytest.mark.parametrize(("capacity", "sample_factor"), [(64, 16), (128, 8)])
def test_the_doorkeeper_spends_one_bit_per_sample(capacity, sample_factor):
    """TinyLFU's doorkeeper is a Bloom filter (two hashes) of one bit per sample, rounded up
    to a power of two: after half a sample of distinct keys, about a third of keys never seen
    look seen once (theory: (1 - e^-1)^2 = 0.40). Twice the bits would show about 0.15, half
    of them about 0.75: the rate pins the memory the filter costs."""
    sketch = FrequencySketch(capacity=capacity, sample_factor=sample_factor)
    assert sketch.sample_size == 1024  # a power of two: no rounding up
    for key in range(512):
        sketch.increment(key)
    unseen = range(10**6, 10**6 + 4000)
    false_positive_rate = sum(1 for k in unseen if sketch.estimate(k) >= 1) / len(unseen)
    assert 0.25 <= false_positive_rate <= 0.5
