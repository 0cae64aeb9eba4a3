# expect: wrong_state from check_admission(Wrong)
class Wrong(AdmittingScheduler):
    def admit_waiting(self, plan):
        add = self.manager.add_sequence

        def add_after_popping(seq_id, tokens):
            try:
                return add(seq_id, tokens)
            except OutOfBlocks:
                self.waiting.popleft()  # popped before add_sequence succeeded: a refusal loses it
                raise

        self.manager.add_sequence = add_after_popping
        super().admit_waiting(plan)
        del self.manager.add_sequence
