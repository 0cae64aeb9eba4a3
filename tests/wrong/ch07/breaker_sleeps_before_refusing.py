# expect: slow_answer from check_circuit_breaker(Wrong)
class Wrong(MyBreaker):
    def allow(self):
        if self.state != "closed":
            time.sleep(self.cooldown_s / 20)  # "give the store a moment"
        return super().allow()
