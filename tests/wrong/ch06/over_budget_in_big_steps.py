# expect: wrong_state
# check: check_admission(Wrong)
class Wrong(AdmittingScheduler):
    def admit_waiting(self, plan):  # right with budgets of 10, 3 tokens over with larger ones
        plan.token_budget += 3 if plan.token_budget > 10 else 0
        try:
            super().admit_waiting(plan)
        finally:
            plan.token_budget -= 3 if plan.token_budget > 13 else 0
