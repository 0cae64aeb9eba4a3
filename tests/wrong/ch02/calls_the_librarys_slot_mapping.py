# expect: calls_library from check_manager_slots(SequenceManager)
from paged_kv.cache.block_table import slot_mapping  # noqa: F401 (the patched cell calls it)

patch(
    "return [table[t // size] * size + t % size for t in range(start, end)]",
    "return slot_mapping(table, size, start, end)",
)
