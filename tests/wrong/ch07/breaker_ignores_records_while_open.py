# expect: wrong_state from check_circuit_breaker(Wrong)
class Wrong(MyBreaker):
    def record_failure(self):
        if self.state != "open":  # a call that ends while open is forgotten
            super().record_failure()

    def record_success(self):
        if self.state != "open":
            super().record_success()
