"""paged_kv.serving.tokenizer: the byte tokenizer."""

from paged_kv.serving import ByteTokenizer

# Token id 0 is a token like any other: in prompts, appends, hashes, the engine and the byte
# tokenizer (it is the NUL byte). A falsy-value check (`if token:`, `0 < t`) anywhere would
# drop or refuse it.


def test_the_byte_tokenizer_round_trips_the_nul_byte():
    tok = ByteTokenizer()
    assert tok.encode("\x00") == [0]
    assert tok.encode("a\x00b") == [97, 0, 98]
    assert tok.decode([0]) == "\x00"
    assert tok.decode([104, 0, 105]) == "h\x00i"
