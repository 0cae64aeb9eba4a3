# expect: wrong_state from check_admission(AdmittingScheduler)
own = "sum(c.num_tokens for c in plan.chunks if c.admitted)"  # the decodes forgotten
patch("cost > plan.budget_left", f"cost > plan.token_budget - {own}")
