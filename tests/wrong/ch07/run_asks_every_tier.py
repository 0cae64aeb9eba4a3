# expect: needless_questions from check_longest_run(my_longest_run)
patch(
    "        for tier in tiers:\n            n = tier.count_leading(rest)",
    """\
        answers = [tier.count_leading(rest) for tier in tiers]  # every tier, every round
        for tier, n in zip(tiers, answers):""",
)
