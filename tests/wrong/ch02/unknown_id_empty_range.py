# expect: missing_refusal from check_manager_slots(SequenceManager)
# An empty range of an unknown id returns [] instead of raising UnknownSequence.
patch(
    "length = self.num_tokens(seq_id)",
    "if start == end:\n            return []\n        length = self.num_tokens(seq_id)",
)
