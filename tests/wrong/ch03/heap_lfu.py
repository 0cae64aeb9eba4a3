# expect: unbounded_memory from check_policy_contract(HeapLFU)
# The lecture's seed-style heap LFU with lazy deletion: its garbage grows with every touch.
from paged_kv.course.naive import HeapLFU  # noqa: F401 (the check names it)
