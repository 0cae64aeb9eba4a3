# expect: wrong_state from check_admission(Wrong)
class Wrong(AdmittingScheduler):
    def admit_waiting(self, plan):
        if self.waiting:
            tokens = self.waiting[0].sequence
            if len(tokens) - self.manager.num_prefix_hit_tokens(tokens) > plan.budget_left:
                return  # even in an empty step: a request bigger than the budget never runs
        super().admit_waiting(plan)
