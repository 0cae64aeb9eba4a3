# expect: wrong_state from check_admission(Wrong)
class Wrong(AdmittingScheduler):
    def admit_waiting(self, plan):  # admits while cost < budget_left: an exact fit waits
        plan.token_budget -= 1
        super().admit_waiting(plan)
        plan.token_budget += 1
