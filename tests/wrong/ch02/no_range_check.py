# expect: missing_refusal from check_manager_slots(SequenceManager)
patch("if not 0 <= start <= end <= length:", "if False:")
