# expect: wrong_order from check_add_and_free(SequenceManager)
patch("self.pool.release(table[::-1])", "self.pool.release(table)")
