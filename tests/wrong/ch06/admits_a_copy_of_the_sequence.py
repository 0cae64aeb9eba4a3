# expect: wrong_state from check_admission(AdmittingScheduler)
from paged_kv.cache.sequence import TokenSequence  # noqa: F401 (the patched cell uses it)

patch(
    "tokens = request.admission_sequence()",  # a copy: the request never sees its hits
    "tokens = TokenSequence(request.admission_sequence().token_ids)",
)
