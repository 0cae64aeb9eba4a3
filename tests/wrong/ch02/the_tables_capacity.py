# expect: wrong_result from check_manager_slots(Wrong)
class Wrong(SequenceManager):
    def slot_mapping(self, seq_id, start=0, end=None):
        table, size = self.block_table(seq_id), self.block_size
        end = len(table) * size if end is None else end
        return [table[t // size] * size + t % size for t in range(start, end)]
