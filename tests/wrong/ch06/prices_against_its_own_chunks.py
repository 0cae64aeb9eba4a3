# expect: wrong_state from check_admission(Wrong)
class Wrong(AdmittingScheduler):
    def admit_waiting(self, plan):  # the budget minus its admissions: the decodes forgotten
        decodes = sum(c.num_tokens for c in plan.chunks if not c.admitted)
        plan.token_budget += decodes
        super().admit_waiting(plan)
        plan.token_budget -= decodes
