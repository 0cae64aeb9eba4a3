# expect: missing_refusal from check_manager_slots(Wrong)
# An empty range of an unknown id returns [] instead of raising UnknownSequence.
class Wrong(SequenceManager):
    def slot_mapping(self, seq_id, start=0, end=None):
        if start == end:
            return []
        return super().slot_mapping(seq_id, start, end)
