# expect: wrong_error from check_add_and_free(SequenceManager)
patch(
    "        if seq_id in self.tables:\n",
    '        if not token_ids:\n            raise InvalidArgument("empty prompt")\n'
    "        if seq_id in self.tables:\n",
)
