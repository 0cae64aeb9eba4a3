# expect: wrong_state from check_circuit_breaker(MyBreaker)
# a call allowed before the breaker opened, ending while it is open, is forgotten
patch('succeeded."""', 'succeeded."""\n        if self.state == "open":\n            return')
patch('failed."""', 'failed."""\n        if self.state == "open":\n            return')
