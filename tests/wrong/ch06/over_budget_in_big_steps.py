# expect: wrong_state from check_admission(Wrong)
class Wrong(AdmittingScheduler):
    def admit_waiting(self, plan):  # right with budgets of 10, 3 tokens over with larger ones
        extra = 3 if plan.token_budget > 10 else 0
        plan.token_budget += extra
        super().admit_waiting(plan)
        plan.token_budget -= extra
