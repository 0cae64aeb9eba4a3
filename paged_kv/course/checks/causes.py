"""The causes a check can name: each key is defined (`NAME := "key"`) with the one template
that says it, from the fields its callers pass (what was seen, what to do).

A failure names exactly one cause, and only the cause its evidence shows: `wrong_order` only
when the items are right and their order is not, `not_all_or_nothing` only when a refused call
changed what it should have left alone. Tests match the key, never the prose. A cause is raised
with `harness.Mismatch(KEY, ...)` or `CheckFailed(..., cause=KEY)`.
"""

from __future__ import annotations

_SAW = "`{line}` gives {got}"
TEMPLATES = {
    (RAISED := "raised"): "`{line}` raised {error}{where}",
    (WRONG_ERROR := "wrong_error"): "`{line}` should raise {want} ({why}), but it raised "
    "{error}{where}",
    (MISSING_REFUSAL := "missing_refusal"): "`{line}` should raise {want} ({why}), but it "
    "returned {got}",
    (WRONG_RESULT := "wrong_result"): "`{line}` should give {want}, got {got}",
    (WRONG_ORDER := "wrong_order"): "`{line}` has the right items in the wrong order (or not "
    "as a list): it should be {want}, got {got}",
    (WRONG_STATE := "wrong_state"): "after `{line}`, `{expr}` should be {want}, got {got}",
    (NOT_ALL_OR_NOTHING := "not_all_or_nothing"): "`{line}` refused, as it should, but changed "
    "things first: `{expr}` is {got}, it was {want}. Check everything before changing anything",
    (MUTATES_ARGUMENT := "mutates_argument"): "the argument given to `{line}` was {want} and is "
    "{got} {when}: it is the caller's, read it (copy it if you keep it), never change it",
    (SHARES_RESULT := "shares_result"): "the list `{line}` returned is the object's own: the "
    "caller changed it and `{expr}` changed with it ({want} became {got}); return a copy",
    (WORK_GROWS := "work_grows"): "{what} cost {small:,} units of work (Python lines run plus "
    "container entries touched) at {small_size} but {large:,} at {large_size}{where}: it does "
    "work that grows with the size",
    (UNBOUNDED_MEMORY := "unbounded_memory"): "`{what}` grew from {small:,} to {large:,} "
    "entries while {while_}: it keeps something for blocks that are gone",
    (TOO_SLOW := "too_slow"): "your code was still running after {seconds:g} s, while {stage}: "
    "too slow at that size",
    (LIBRARY_REFUSED := "library_refused"): "the library raised {error} Your code returned "
    "without an error earlier, but left things in a state the library refuses",
    (BAD_SIGNATURE := "bad_signature"): "{doing} failed before your code ran: {why}",
    # a CheckFailed raised without a cause: a defect of the check itself
    (UNNAMED := "unnamed"): "{message}",
    # chapters 05-07 (tensors, schedulers, tiers)
    (WRONG_SHAPE := "wrong_shape"): "`{line}` returned {got}, the reference {want}",
    (WRONG_DTYPE := "wrong_dtype"): "`{line}` returned {got}, the reference {want}",
    (NOT_FINITE := "not_finite"): _SAW + " where the reference gives {want}: NaN or inf from "
    "these inputs",
    (OVERFLOW := "overflow"): _SAW + " where the reference gives {want}, at magnitudes where "
    "exp overflows (or underflows to 0)",
    (PRECISION := "precision"): _SAW + " where the reference gives {want}: the error is your "
    "arithmetic's precision",
    (MISSING_RESCALE := "missing_rescale"): _SAW + ", exactly what skipping the rescale gives "
    "(the reference gives {want}): when a tile raises the running maximum from m to m', "
    "multiply both the running sum and the accumulator by exp(m - m'), and divide by the sum "
    "once, at the end",
    (MISSING_SCALE := "missing_scale"): _SAW + ", exactly what attention without the "
    "1/sqrt(head_dim) scale gives (the reference gives {want}): scale the scores q·k by "
    "1/sqrt(head_dim)",
    (WRONG_KV_HEAD := "wrong_kv_head"): _SAW + ", exactly what query head h reading KV head "
    "h % num_kv_heads gives (the reference gives {want}): query head h reads KV head "
    "h // (q_heads // kv_heads)",
    (WRONG_DIM := "wrong_dim"): _SAW + ", exactly what weighing the slices along another "
    "dimension gives (the reference gives {want}): the slices are the last dimension of lses "
    "(dim=-1), the ones before it are batch",
    (KEEPS_TILES := "keeps_tiles"): "`{line}`: {grown:,} more bytes of tensors were alive at "
    "tile {late} than at tile {early}, so your function keeps what it has read (a list of "
    "tiles, a copy, torch.cat). An online softmax holds only the running maximum, the running "
    "sum and the accumulator: its memory does not grow with the row",
    (NOT_PAGED := "not_paged"): "`{line}` made a tensor of {numel:,} elements from the cache at "
    "once, and one block holds {block:,}: read the cache one block at a time (one tile per "
    "block of the table), never gathered whole",
    (CALLS_LIBRARY := "calls_library"): "`{line}` called the library's `{name}`: this exercise "
    "is to write it yourself, reading the cache block by block",
    (WRONG_CHECK_ORDER := "wrong_check_order"): "`{line}` should raise {want} ({why}), but it "
    "raised {error}: a check that comes later refused it first",
    (NEEDLESS_QUESTIONS := "needless_questions"): "`{line}` asked {tier} {got} questions where "
    "{want} suffice: at each point of the run, ask about every key from there to the end, and a "
    "slower tier only when the faster ones answered 0 (a question to Redis is a round trip)",
    (ENDLESS_LOOP := "endless_loop"): "`{line}` never returned: it went on asking (or looping) "
    "long after a correct answer would have stopped",
    (SLOW_ANSWER := "slow_answer"): "`{line}` took {seconds:.2f} s to answer: it must answer at "
    "once (an open breaker refuses without waiting, so that the caller recomputes instead)",
    # the capstone's verdicts, each a message of its own
    (PART_AT_FAULT := "part_at_fault"): "{message}",
    (SCHEDULER_AT_FAULT := "scheduler_at_fault"): "{message}",
    (PARTS_DISAGREE := "parts_disagree"): "{message}",
}


def say(cause: str, hint: str = "", **fields: object) -> str:
    """The message for `cause`, from its template and `fields`, then `hint` (what to do here)."""
    text = TEMPLATES[cause].format(**fields) + "."
    if hint:
        text += f" {hint[0].upper()}{hint[1:]}" + ("" if hint.endswith((".", "?", "!")) else ".")
    return text
