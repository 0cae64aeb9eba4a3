"""Paged attention: attention that reads K/V through block tables, never made contiguous.

`paged_decode` picks the Triton kernel on CUDA when triton is installed, else the torch
reference; `paged_prefill` handles new tokens attending to a cached prefix.
"""

from paged_kv.attention.flashinfer import to_flashinfer
from paged_kv.attention.reference import paged_decode, paged_prefill

__all__ = ["paged_decode", "paged_prefill", "to_flashinfer"]
