# expect: wrong_state from check_admission(AdmittingScheduler)
patch("cost = len(tokens) - self.manager.num_prefix_hit_tokens(tokens)", "cost = len(tokens)")
