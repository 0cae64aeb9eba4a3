# expect: wrong_state from check_admission(Wrong)
class Wrong(AdmittingScheduler):
    def admit_waiting(self, plan):  # a step of decodes only taken as empty, the decodes forgotten
        decodes, plan.chunks = plan.chunks, []
        plan.token_budget += sum(c.num_tokens for c in decodes)
        super().admit_waiting(plan)
        plan.token_budget -= sum(c.num_tokens for c in decodes)
        plan.chunks = decodes + plan.chunks
