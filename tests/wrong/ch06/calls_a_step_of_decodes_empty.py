# expect: wrong_state from check_admission(AdmittingScheduler)
patch("and plan.chunks:", "and any(c.admitted for c in plan.chunks):")  # decodes forgotten
