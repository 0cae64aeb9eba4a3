"""`python -m paged_kv`: the demo's arguments and its table of requests."""

import pytest

from paged_kv.__main__ import QUESTIONS, RANGES, main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--requests", "0"], "argument --requests: must be a whole number in 1..8, got '0'"),
        (["--requests", "-3"], "argument --requests: must be a whole number in 1..8, got '-3'"),
        (["--requests", "9"], "--requests: must be a whole number in 1..8"),
        (["--requests", "2.5"], "--requests: must be a whole number in 1..8"),
        (["--new-tokens", "0"], "--new-tokens: must be a whole number in 1..1024, got '0'"),
        (["--new-tokens", "1025"], "--new-tokens: must be a whole number in 1..1024"),
        (["--blocks", "0"], "argument --blocks: must be a whole number in 1..1024, got '0'"),
        (["--blocks", "x"], "argument --blocks: must be a whole number in 1..1024, got 'x'"),
        (["--block-size", "0"], "--block-size: must be a whole number in 1..256, got '0'"),
        (["--block-size", "100000"], "--block-size: must be a whole number in 1..256"),
        (["--eviction", "mru"], "argument --eviction: invalid choice: 'mru'"),
        (
            ["--blocks", "3"],
            "the longest prompt (93 tokens) plus --new-tokens 48 needs 9 blocks of 16 tokens, "
            "but --blocks is 3: pass --blocks 9 or more",
        ),
        (
            ["--requests", "1", "--new-tokens", "1024", "--blocks", "1024", "--block-size", "1"],
            "the longest prompt (77 tokens) plus --new-tokens 1024 needs 1101 blocks of 1 tokens",
        ),
    ],
)
def test_a_bad_argument_is_a_usage_error_stating_what_is_allowed(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("usage: python -m paged_kv")
    assert message in err, err
    assert "Traceback" not in err


def test_every_number_the_demo_takes_has_its_range_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for name, (lo, hi) in RANGES.items():
        assert f"--{name.replace('_', '-')} {lo}..{hi}" in out
    assert RANGES["requests"] == (1, len(QUESTIONS))


def test_the_table_shows_prompt_hits_apart_from_tokens_recomputed_after_preemption(capsys):
    main(["--requests", "4", "--new-tokens", "32", "--blocks", "10", "--eviction", "lfu"])
    out = capsys.readouterr().out
    header, *lines = out.split("\nprompt:\n")[0].strip("\n").splitlines()
    assert header.split()[:5] == ["id", "prompt", "hits", "preempted", "recomputed"]
    rows = [[int(x) for x in line.split()[:5]] for line in lines]
    assert len(rows) == 4
    for _, prompt, hits, preempted, recomputed in rows:
        assert hits % 16 == 0 and hits < prompt  # whole blocks of the prompt, never its output
        assert (recomputed > 0) == (preempted > 0)
    summary = dict(
        line.strip().rsplit(maxsplit=1) for line in out.split("eviction\n")[1].splitlines()
    )
    assert sum(row[4] for row in rows) == int(summary["tokens recomputed after preemption"]) > 0
