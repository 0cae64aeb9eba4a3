# expect: wrong_state from check_admission(Wrong)
class Wrong(AdmittingScheduler):
    def admit_waiting(self, plan):
        super().admit_waiting(plan)
        if self.waiting and plan.chunks:  # the next one was refused: "try" it anyway
            request = self.waiting[0]
            self.manager.add_sequence(request.request_id, request.admission_sequence())
            self.manager.free_sequence(request.request_id)
