# expect: wrong_result from check_online_softmax(online_softmax)
patch("acc * rescale + weights @ values", "acc * rescale + weights @ values / weights.sum()")
