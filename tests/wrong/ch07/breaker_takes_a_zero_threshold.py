# expect: wrong_error from check_circuit_breaker(Wrong)
class Wrong(MyBreaker):
    def __init__(self, failure_threshold=3, cooldown_s=1.0, *, clock=time.monotonic):
        if failure_threshold < 1:
            raise ValueError("failure_threshold >= 1")
        super().__init__(failure_threshold, cooldown_s, clock=clock)
