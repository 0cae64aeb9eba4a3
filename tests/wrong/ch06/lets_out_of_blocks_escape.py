# expect: raised from check_admission(Wrong)
class Wrong(AdmittingScheduler):
    def admit_waiting(self, plan):
        add, refusals = self.manager.add_sequence, []

        def add_noting(seq_id, tokens):
            try:
                return add(seq_id, tokens)
            except OutOfBlocks as refusal:
                refusals.append(refusal)
                raise

        self.manager.add_sequence = add_noting
        super().admit_waiting(plan)
        del self.manager.add_sequence
        if refusals:
            raise refusals[0]  # OutOfBlocks escapes
