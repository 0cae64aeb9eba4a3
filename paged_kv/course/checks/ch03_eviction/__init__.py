"""Chapter 03 checks: an eviction policy evicts like the library's LFU / aging LFU and keeps
the policy contract, in O(1) work with bounded structures.

A policy is driven the way `BlockPool` drives it: `touch(b)` (a use: allocation, hit or
keep), `make_evictable(b)` (its last reference went), `revive(b)` (a cached block is hit),
`evict()` (choose a victim and forget it), `forget(b)`, `len()` and `in`. `count(b)` is a
method, as in `paged_kv.cache.eviction.LFU`.
"""

from paged_kv.course.checks.ch03_eviction.contract import check_policy_contract
from paged_kv.course.checks.ch03_eviction.lfu import check_aging, check_lfu

__all__ = ["check_aging", "check_lfu", "check_policy_contract"]
