# expect: wrong_state from check_admission(Wrong)
class Wrong(AdmittingScheduler):
    def admit_waiting(self, plan):
        add = self.manager.add_sequence

        def add_when_running(seq_id, tokens):
            self.waiting[0].status = RequestStatus.RUNNING  # before add_sequence succeeded
            return add(seq_id, tokens)

        self.manager.add_sequence = add_when_running
        super().admit_waiting(plan)
        del self.manager.add_sequence
