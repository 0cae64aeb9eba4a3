"""Chapter 07 checks: a learner's blob codec writes the chapter's format and refuses every
damaged or foreign blob with the library's reason, their run across tiers takes whole runs
from the first tier holding the next block and stops at the first gap, and their circuit
breaker opens, waits and closes like the library's."""

from paged_kv.course.checks.ch07_beyond_one_process.blob_codec import check_blob_codec
from paged_kv.course.checks.ch07_beyond_one_process.breaker import check_circuit_breaker
from paged_kv.course.checks.ch07_beyond_one_process.longest_run import check_longest_run

__all__ = ["check_blob_codec", "check_circuit_breaker", "check_longest_run"]
