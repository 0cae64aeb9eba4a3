# expect: wrong_state from check_admission(AdmittingScheduler)
patch("cost > plan.budget_left", "cost > plan.budget_left + 3 * (plan.token_budget > 10)")
