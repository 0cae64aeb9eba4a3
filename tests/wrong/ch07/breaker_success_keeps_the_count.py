# expect: wrong_state from check_circuit_breaker(Wrong)
class Wrong(MyBreaker):
    def record_success(self):
        self.state = "closed"  # the failures in a row are not reset
