# expect: missing_refusal from check_append(SequenceManager)
patch(
    "total = self.num_tokens",
    "if seq_id not in self.tables:\n            return []\n        total = self.num_tokens",
)
