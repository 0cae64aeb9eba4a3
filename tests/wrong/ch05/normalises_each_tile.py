# expect: wrong_result from check_online_softmax(online_softmax)
patch("acc = acc * rescale + weights @ values", "acc = acc * rescale + weights @ values / weights.sum()")
