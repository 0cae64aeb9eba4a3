# expect: wrong_result from check_manager_slots(SequenceManager)
patch("for t in range(start, end)]", "for t in range(start, min(end + 1, length))]")
