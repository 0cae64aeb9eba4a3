# expect: wrong_state from check_admission(AdmittingScheduler)
patch("len(tokens) - hits, True)", "len(tokens) - hits, False)")
