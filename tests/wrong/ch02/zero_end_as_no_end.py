# expect: wrong_result from check_manager_slots(SequenceManager)
patch("end = length if end is None else end", "end = end or length")
