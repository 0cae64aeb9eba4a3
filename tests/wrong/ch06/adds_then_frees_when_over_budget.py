# expect: wrong_state from check_admission(AdmittingScheduler)
patch(
    "and plan.chunks:",
    "and plan.chunks:  # too big: added anyway, then freed\n"
    "                self.manager.add_sequence(request.request_id, tokens)\n"
    "                self.manager.free_sequence(request.request_id)",
)
