# expect: not_finite from check_online_softmax(online_softmax)
patch("if total == 0:", "if False:")  # acc / total = 0 / 0 when every key is masked
