# triton.knobs: Triton's settings (most read from TRITON_* environment variables).

class NvidiaTool:
    path: str
    version: str

class cache_knobs:
    dir: str

class compilation_knobs:
    instrumentation_mode: str
    fpsan_homomorphic_casts: bool

class runtime_knobs:
    debug: bool

cache: cache_knobs
compilation: compilation_knobs
runtime: runtime_knobs
