# expect: wrong_state from check_admission(Wrong)
class Wrong(AdmittingScheduler):
    def admit_waiting(self, plan):
        self.manager.num_prefix_hit_tokens = lambda tokens, **keys: 0  # shadows the method
        super().admit_waiting(plan)
        del self.manager.num_prefix_hit_tokens
