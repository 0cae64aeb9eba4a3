# expect: wrong_result from check_manager_slots(SequenceManager)
patch("table[t // size] * size + t % size", "table[t % len(table)] * size + t // len(table)")
