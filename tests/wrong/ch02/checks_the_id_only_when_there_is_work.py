# expect: missing_refusal from check_append(SequenceManager)
patch(
    "total = self.num_tokens",
    "if not token_ids:\n            return []\n        total = self.num_tokens",
)
