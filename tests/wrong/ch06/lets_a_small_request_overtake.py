# expect: wrong_state from check_admission(AdmittingScheduler)
fits = "len(r.sequence) - self.manager.num_prefix_hit_tokens(r.sequence) <= plan.budget_left"
patch(
    "request = self.waiting[0]",
    f"request = next((r for r in self.waiting if {fits}), "
    "self.waiting[0])  # the first that fits overtakes",
)
patch("self.waiting.popleft()", "self.waiting.remove(request)")
